package coralcaddy

import (
	"strings"
	"testing"
)

func TestAppConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		app  App
		want string
	}{
		{"bad listen", App{Listen: "nowhere"}, "want IP:PORT"},
		{"bad advertise", App{Listen: "127.0.0.2:4000", Advertise: "x"}, "advertise"},
		{"bad bootstrap", App{Listen: "127.0.0.2:4000", Bootstrap: []string{"127.0.0.3"}}, "bootstrap"},
		{"no key off loopback", App{Listen: "192.0.2.1:4000"}, "key_file is required"},
		{"missing key file", App{Listen: "127.0.0.2:4000", KeyFile: "/nonexistent/key"}, "does not exist"},
		{"bad cluster level", App{Listen: "127.0.0.2:4000", Clusters: map[string]string{"x": "a"}}, "not a number"},
		{"cluster level too high", App{Listen: "127.0.0.2:4000", Clusters: map[string]string{"5": "a"}}, "Pins"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := tc.app.nodeConfig()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, _, err := (&App{Listen: "127.0.0.2:4000"}).nodeConfig(); err != nil {
		t.Errorf("a loopback node without a key: %v", err)
	}
}
