package coralcaddy

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/coralcdn/coral/coraldht"
)

// keysTestCall runs the /coral/keys handler with a body.
func keysTestCall(t *testing.T, method, target string, body []byte) (adminKeys, int) {
	t.Helper()
	w := httptest.NewRecorder()
	err := (&AdminAPI{}).handleKeys(w, httptest.NewRequest(method, target, bytes.NewReader(body)))
	if err != nil {
		return adminKeys{}, adminTestStatusCode(err)
	}
	var doc adminKeys
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
		t.Fatalf("%s %s: %v\n%s", method, target, err, w.Body)
	}
	return doc, w.Code
}

// TestAdminKeys: the keyring admin calls install a key (from a file or
// the body), make it primary and remove the old one, on the running
// node; /coral/keys and /coral/status show fingerprints, never keys; bad
// calls get a 4xx and change nothing.
func TestAdminKeys(t *testing.T) {
	const addr = "127.0.180.20:4000"
	app := provisionApp(t, &App{Listen: addr})
	node := app.Node()
	fps := func(doc adminKeys) []string {
		var out []string
		for _, k := range doc.Keys {
			out = append(out, k.Fingerprint)
		}
		return out
	}
	doc, code := keysTestCall(t, http.MethodGet, "/coral/keys", nil)
	if code != http.StatusOK || len(doc.Keys) != 1 || !doc.Keys[0].Primary {
		t.Fatalf("GET /coral/keys: %d %+v; want the one (development) key, primary", code, doc)
	}
	first := doc.Keys[0].Fingerprint

	secret := coraldht.GenerateKey()
	bodyKey, err := coraldht.ParseKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	doc, code = keysTestCall(t, http.MethodPost, "/coral/keys/install", secret)
	if code != http.StatusOK || doc.Fingerprint != bodyKey.Fingerprint() || len(doc.Keys) != 2 || doc.Keys[1].Primary {
		t.Fatalf("install from the body: %d %+v", code, doc)
	}
	if bytes.Contains([]byte(doc.Fingerprint), bytes.TrimSpace(secret)) {
		t.Fatal("the answer shows the key")
	}
	file := filepath.Join(t.TempDir(), "next.key")
	if err := coraldht.WriteKeyFile(file); err != nil {
		t.Fatal(err)
	}
	fileKey, err := coraldht.LoadKeyFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if doc, code = keysTestCall(t, http.MethodPost, "/coral/keys/install?file="+file, nil); code != http.StatusOK || len(doc.Keys) != 3 {
		t.Fatalf("install from a file: %d %+v", code, doc)
	}
	doc, code = keysTestCall(t, http.MethodPost, "/coral/keys/primary?fingerprint="+fileKey.Fingerprint()[:8], nil)
	if code != http.StatusOK || fps(doc)[0] != fileKey.Fingerprint() || !doc.Keys[0].Primary {
		t.Fatalf("primary by prefix: %d %+v", code, doc)
	}
	if doc, code = keysTestCall(t, http.MethodPost, "/coral/keys/remove?fingerprint="+first, nil); code != http.StatusOK || len(doc.Keys) != 2 {
		t.Fatalf("remove: %d %+v", code, doc)
	}
	want := []string{fileKey.Fingerprint(), bodyKey.Fingerprint()}
	if got := node.Keyring().Fingerprints(); got[0] != want[0] || got[1] != want[1] || len(got) != 2 {
		t.Fatalf("the node's keyring is %v; want %v", got, want)
	}

	for _, c := range []struct {
		method, target string
		body           []byte
		status         int
	}{
		{http.MethodPost, "/coral/keys/remove?fingerprint=" + fileKey.Fingerprint(), nil, http.StatusBadRequest}, // the primary
		{http.MethodPost, "/coral/keys/remove?fingerprint=00", nil, http.StatusNotFound},
		{http.MethodPost, "/coral/keys/primary", nil, http.StatusNotFound},
		{http.MethodPost, "/coral/keys/install", []byte("not a key"), http.StatusBadRequest},
		{http.MethodPost, "/coral/keys/install", nil, http.StatusBadRequest},
		{http.MethodPost, "/coral/keys/install?file=/nonexistent/key", nil, http.StatusBadRequest},
		{http.MethodPost, "/coral/keys/rotate", nil, http.StatusNotFound},
		{http.MethodGet, "/coral/keys/install", nil, http.StatusMethodNotAllowed},
		{http.MethodPost, "/coral/keys", nil, http.StatusMethodNotAllowed},
	} {
		if _, code := keysTestCall(t, c.method, c.target, c.body); code != c.status {
			t.Errorf("%s %s: status %d; want %d", c.method, c.target, code, c.status)
		}
	}
	if got := node.Keyring().Fingerprints(); len(got) != 2 || got[0] != want[0] {
		t.Fatalf("bad calls changed the keyring to %v", got)
	}

	var st adminStatus
	adminTestGet(t, "/coral/status", "/coral/status", &st)
	if st.DHT == nil || len(st.DHT.NetworkKeys) != 2 || st.DHT.NetworkKeys[0].Fingerprint != want[0] || !st.DHT.NetworkKeys[0].Primary {
		t.Fatalf("status network_keys: %+v", st.DHT)
	}
}
