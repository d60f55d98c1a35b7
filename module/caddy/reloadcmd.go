package coralcaddy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
	"golang.org/x/net/http/httpguts"
)

// A reload whose Caddyfile does not adapt never reaches a running Caddy:
// `caddy reload` adapts the file itself and gives up with exit status 1,
// so caddy_config_last_reload_successful and caddy_coral_reload_success
// stay 1 and an alert on them never fires. `coral-reload` sends the
// configuration's text instead, to POST /coral/load on the admin API,
// where the running server adapts it (as the user it runs as, with the
// file's name for relative imports) and loads it: every failure, adapting
// included, is counted in caddy_coral_reload_success and
// caddy_coral_reload_failures_total. The packaged unit's ExecReload is
// `coral-caddy coral-reload`.

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "coral-reload",
		Usage: "--config <path> [--adapter <name>] [--address <interface>] [--force]",
		Short: "Reloads a running Caddy, counting every failure in its reload metrics",
		Long: `
Like 'caddy reload', but the running Caddy adapts the configuration
itself: the text of the --config file goes to the admin API's
POST /coral/load, which adapts it (with --adapter, by default the
Caddyfile adapter for a file named Caddyfile*, else JSON) and loads it.
A configuration that does not adapt is a failed reload there, in
caddy_coral_reload_success (0) and caddy_coral_reload_failures_total,
as is one that fails to load; 'caddy reload' gives up before the
server hears of it.

--address is the admin API's address; without it, the address the
configuration names if it adapts here, else Caddy's default. With
--force the configuration is loaded even when it is unchanged (a key
file or blacklist the Caddyfile names may have changed).
`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.Flags().StringP("config", "c", "", "Configuration file (required)")
			cmd.Flags().StringP("adapter", "a", "", "Name of config adapter to apply")
			cmd.Flags().String("address", "", "Address of the administration API endpoint")
			cmd.Flags().BoolP("force", "f", false, "Force config reload, even if it is the same")
			cmd.RunE = caddycmd.WrapCommandFuncForCobra(cmdCoralReload)
		},
	})
}

func cmdCoralReload(fl caddycmd.Flags) (int, error) {
	file, adapter, address := fl.String("config"), fl.String("adapter"), fl.String("address")
	if file == "" {
		return caddy.ExitCodeFailedStartup, errors.New("--config is required")
	}
	text, err := os.ReadFile(file)
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	if adapter == "" && strings.HasPrefix(filepath.Base(file), "Caddyfile") {
		adapter = "caddyfile"
	}
	if address == "" {
		address = adminAddress(file, adapter, text)
	}
	headers := http.Header{"Caddy-Config-Source-File": {file}, "Caddy-Config-Source-Adapter": {adapter}}
	if adapter != "" {
		headers.Set("Content-Type", "text/"+adapter)
	}
	if fl.Bool("force") {
		headers.Set("Cache-Control", "must-revalidate")
	}
	resp, err := caddycmd.AdminAPIRequest(address, http.MethodPost, "/coral/load", headers, bytes.NewReader(text))
	if err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("reloading %s: %w", file, err)
	}
	_ = resp.Body.Close()
	return caddy.ExitCodeSuccess, nil
}

// adminAddress is the admin API's address the configuration names: from
// the adapted configuration, or, when it does not adapt here, from the
// admin line of a Caddyfile's global options, which the Caddyfile's
// parser reads without knowing any directive; else Caddy's default.
func adminAddress(file, adapter string, text []byte) string {
	if addr, err := caddycmd.DetermineAdminAPIAddress("", nil, file, adapter); err == nil {
		return addr
	}
	if adapter == "caddyfile" {
		if blocks, err := caddyfile.Parse(file, text); err == nil && len(blocks) > 0 && len(blocks[0].Keys) == 0 {
			for _, seg := range blocks[0].Segments {
				if seg.Directive() == "admin" && len(seg) > 1 && seg[1].Text != "{" {
					return seg[1].Text
				}
			}
		}
	}
	return caddy.DefaultAdminListen
}

// handleLoad is POST /coral/load: Caddy's /load, adapting the body by its
// Content-Type in this process, and counting a failure to adapt or to load
// as a failed reload.
func (a *AdminAPI) handleLoad(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: errors.New("method not allowed; use POST")}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxLoadBytes+1))
	if err == nil && len(body) > maxLoadBytes {
		err = fmt.Errorf("configuration larger than %d bytes", maxLoadBytes)
	}
	if err != nil {
		return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: err}
	}
	file := r.Header.Get("Caddy-Config-Source-File")
	cfg, warnings, err := adaptLoad(r.Header.Get("Content-Type"), file, body)
	if err != nil {
		reloads.failed("", err)
		return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: err, Warnings: warnings}
	}
	before := reloads.failureCount()
	force := httpguts.HeaderValuesContainsToken(r.Header["Cache-Control"], "must-revalidate")
	if err := caddy.Load(cfg, force); err != nil {
		if reloads.failureCount() == before {
			// It failed before the coral app, which counts its own.
			reloads.failed("", err)
		}
		return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: fmt.Errorf("loading config: %w", err), Warnings: warnings}
	}
	caddy.ClearLastConfigIfDifferent(file, r.Header.Get("Caddy-Config-Source-Adapter"))
	if len(warnings) > 0 {
		return adminJSON(w, struct {
			Warnings []caddyconfig.Warning `json:"warnings"`
		}{warnings})
	}
	return nil
}

// maxLoadBytes bounds a configuration sent to /coral/load.
const maxLoadBytes = 16 << 20

// adaptLoad adapts a configuration by its Content-Type, as Caddy's /load
// does ("text/caddyfile": the Caddyfile adapter; none or JSON: as is),
// giving the adapter the file's name for relative imports.
func adaptLoad(contentType, file string, body []byte) ([]byte, []caddyconfig.Warning, error) {
	if contentType == "" {
		return body, nil, nil
	}
	ct, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil, nil, fmt.Errorf("invalid Content-Type: %w", err)
	}
	if strings.HasSuffix(ct, "/json") {
		return body, nil, nil
	}
	_, name, _ := strings.Cut(ct, "/")
	adapter := caddyconfig.GetAdapter(name)
	if adapter == nil {
		return nil, nil, fmt.Errorf("unrecognized config adapter %q", name)
	}
	opts := map[string]any{}
	if file != "" {
		opts["filename"] = file
	}
	cfg, warnings, err := adapter.Adapt(body, opts)
	if err != nil {
		what := "configuration"
		if file != "" {
			what = file
		}
		return nil, warnings, fmt.Errorf("adapting %s with the %s adapter: %w", what, name, err)
	}
	return cfg, warnings, nil
}
