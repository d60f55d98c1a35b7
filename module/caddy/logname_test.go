package coralcaddy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddytest"
)

// TestAppLogsUnderItsName (issue 37, item 5): the coral app's lines carry
// the logger name "coral", so Caddy's per-logger filters (include,
// exclude) select them, like every other module's.
func TestAppLogsUnderItsName(t *testing.T) {
	logFile := filepath.Join(t.TempDir(), "caddy.log")
	port := 9180 + int(testProxyPort.Add(1))
	caddytest.NewTester(t).InitServer(fmt.Sprintf(`{
	skip_install_trust
	admin {$CORAL_TEST_ADMIN}
	http_port %[1]d
	grace_period 1ns
	log {
		output file %[2]s
		format json
	}
	coral {
		listen 127.0.5.16:4000
	}
}
:%[1]d {
	respond "ok"
}`, port, logFile), "caddyfile")
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	var started string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, `"msg":"node started"`) {
			started = line
		}
	}
	if started == "" {
		t.Fatalf("no \"node started\" line in the log:\n%s", b)
	}
	if !strings.Contains(started, `"logger":"coral"`) {
		t.Errorf("the coral app's line has no logger name coral: %s", started)
	}
}
