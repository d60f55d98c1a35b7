package labresult

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestWrite: a run asked for a file writes its fields beside a finished
// provenance naming the go test command; a run not asked writes nothing.
func TestWrite(t *testing.T) {
	out := filepath.Join(t.TempDir(), "sub", "x.json")
	t.Setenv("LABRESULT_TEST_OUT", out)
	r := Start("test/nodelab", "TestX", "loopback", "LABRESULT_TEST_OUT")
	if !r.Wanted() {
		t.Fatal("Wanted = false with the variable set")
	}
	if err := r.Write(map[string]any{"provenance": 1}); err == nil {
		t.Error("a field named provenance: no error")
	}
	if err := r.Write(map[string]any{"results": []int{1, 2}}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Results    []int `json:"results"`
		Provenance struct {
			Program  string   `json:"program"`
			Command  string   `json:"command"`
			Env      []string `json:"env"`
			Finished string   `json:"finished"`
			Topology string   `json:"topology"`
		} `json:"provenance"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	p := got.Provenance
	wantCmd := "LABRESULT_TEST_OUT=" + out + " go test -count=1 -run TestX -v ./test/nodelab"
	if len(got.Results) != 2 || p.Program != "test/nodelab" || p.Command != wantCmd || len(p.Env) != 1 || p.Finished == "" || p.Topology != "loopback" {
		t.Errorf("wrote %s", b)
	}

	t.Setenv("LABRESULT_TEST_OUT", "")
	r = Start("test/nodelab", "TestX", "loopback", "LABRESULT_TEST_OUT")
	if r.Wanted() {
		t.Error("Wanted = true with the variable empty")
	}
	if err := r.Write(map[string]any{"results": 1}); err != nil {
		t.Error(err)
	}
}
