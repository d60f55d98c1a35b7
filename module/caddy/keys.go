package coralcaddy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/coralcdn/coral/coraldht"
	"go.uber.org/zap"
)

// adminNetworkKey is one installed network key in /coral/status and
// /coral/keys: its fingerprint, never the key.
type adminNetworkKey struct {
	Fingerprint string `json:"fingerprint"`
	Primary     bool   `json:"primary"`
	Accepted    uint64 `json:"datagrams_accepted"`
}

func adminNetworkKeys(keys []coraldht.KeyInfo) []adminNetworkKey {
	out := make([]adminNetworkKey, 0, len(keys))
	for _, k := range keys {
		out = append(out, adminNetworkKey{Fingerprint: k.Fingerprint, Primary: k.Primary, Accepted: k.Accepted})
	}
	return out
}

// adminKeys is the /coral/keys document.
type adminKeys struct {
	Keys []adminNetworkKey `json:"keys"`
	// BadKey counts datagrams no installed key verifies (dropped).
	BadKey uint64 `json:"bad_key_drops"`
	// Fingerprint is the key an install, primary or remove call acted on.
	Fingerprint string `json:"fingerprint,omitempty"`
}

// adminKeyBodyMax bounds an installed key's body: a key file's size.
const adminKeyBodyMax = 4096

// handleKeys serves the node's keyring:
//
//	GET  /coral/keys                         the installed keys
//	POST /coral/keys/install?file=PATH       install a key file as accepted
//	POST /coral/keys/install  (body: key)    the same, the key file's text in the body
//	POST /coral/keys/primary?fingerprint=FP  make an installed key primary
//	POST /coral/keys/remove?fingerprint=FP   remove an accepted key
//
// A fingerprint may be shortened to a prefix naming one key. The changes
// last until the next configuration load, which sets the keys the
// configuration names.
func (a *AdminAPI) handleKeys(w http.ResponseWriter, r *http.Request) error {
	n := runningNode()
	if n == nil {
		return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: errNoApp}
	}
	action := strings.Trim(strings.TrimPrefix(r.URL.Path, "/coral/keys"), "/")
	if action == "" {
		if err := adminOnlyGET(w, r); err != nil {
			return err
		}
		return adminJSON(w, keysDoc(n, ""))
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("%s /coral/keys/%s: use POST", r.Method, action)}
	}
	ring := n.Keyring()
	fp := r.URL.Query().Get("fingerprint")
	var err error
	switch action {
	case "install":
		var k *coraldht.Key
		if k, err = keyOfRequest(r); err == nil {
			fp = k.Fingerprint()
			err = ring.Install(k)
		}
	case "primary":
		err = ring.SetPrimary(fp)
	case "remove":
		err = ring.Remove(fp)
	default:
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("no keyring action %q (install, primary, remove)", action)}
	}
	if err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, coraldht.ErrKeyNotFound) {
			status = http.StatusNotFound
		}
		return caddy.APIError{HTTPStatus: status, Err: err}
	}
	if app, _ := runningApp(); app != nil && app.logger != nil {
		app.logger.Info("network keyring changed through the admin API", zap.String("action", action), zap.String("key", fp), zap.Strings("keys", ring.Fingerprints()))
	}
	return adminJSON(w, keysDoc(n, fp))
}

func keysDoc(n *coraldht.Node, fp string) adminKeys {
	s := n.Stats()
	return adminKeys{Keys: adminNetworkKeys(s.Keys), BadKey: s.Drops.BadAuth, Fingerprint: fp}
}

// keyOfRequest reads the key to install: the file named by ?file=, or the
// body, which holds what a key file holds (base64 or hex).
func keyOfRequest(r *http.Request) (*coraldht.Key, error) {
	if path := r.URL.Query().Get("file"); path != "" {
		return coraldht.LoadKeyFile(path)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, adminKeyBodyMax+1))
	if err != nil {
		return nil, err
	}
	if len(body) == 0 {
		return nil, errors.New("install: give ?file=PATH or the key (base64 or hex) as the body")
	}
	return coraldht.ParseKey(body)
}
