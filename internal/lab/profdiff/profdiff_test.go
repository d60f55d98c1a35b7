package profdiff

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

// TestParseListing reads a real `go tool pprof -top -cum` listing (of
// Caddy answering with respond, from eval/httpbench -profile).
func TestParseListing(t *testing.T) {
	f, err := os.Open("testdata/respond-top.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	if p.Duration != 8*time.Second || p.Total != 10370*time.Millisecond {
		t.Errorf("duration %v, total %v; want 8s, 10.37s", p.Duration, p.Total)
	}
	for name, want := range map[string]time.Duration{
		"net/http.(*conn).serve":   8780 * time.Millisecond,
		"syscall.Write":            2770 * time.Millisecond, // listed as "(inline)"
		"internal/poll.(*FD).Read": 730 * time.Millisecond,
	} {
		if got := p.Cum[name]; got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	if len(p.Cum) != 40 {
		t.Errorf("%d functions, want the listing's 40", len(p.Cum))
	}
	per := p.PerUnit(1000) // 8000 units
	if got, want := per["syscall.Write"], 2770*time.Millisecond/8000; got != want {
		t.Errorf("per unit %v, want %v", got, want)
	}
	if got, want := per[TotalRow], 10370*time.Millisecond/8000; got != want {
		t.Errorf("total per unit %v, want %v", got, want)
	}
}

func TestParseRefusesOtherText(t *testing.T) {
	for _, in := range []string{"", "hello\n", "Duration: 8s, Total samples = 0\n", "      flat  flat%   sum%        cum   cum%\n"} {
		if _, err := Parse(strings.NewReader(in)); err == nil {
			t.Errorf("%q: parsed", in)
		}
	}
}

func TestDiffOrdersByDifference(t *testing.T) {
	a := map[string]time.Duration{TotalRow: 70, "f": 30, "g": 20, "h": 5, "same": 9}
	b := map[string]time.Duration{TotalRow: 50, "f": 10, "g": 18, "same": 9}
	rows := Diff(a, b, 2, 3)
	want := []Row{{TotalRow, 70, 50}, {"f", 30, 10}, {"h", 5, 0}}
	if len(rows) != len(want) {
		t.Fatalf("rows %v, want %v", rows, want)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d: %v, want %v", i, rows[i], want[i])
		}
	}
	var buf bytes.Buffer
	Print(&buf, rows, "coral", "respond")
	if lines := strings.Split(strings.TrimSpace(buf.String()), "\n"); len(lines) != 4 || !strings.HasSuffix(lines[2], "  f") {
		t.Errorf("table:\n%s", buf.String())
	}
}

// TestLoadRealProfile profiles this test binary while it hashes, and finds
// the hashing in what `go tool pprof` reads from the profile.
func TestLoadRealProfile(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Skip("a CPU profile is already running:", err)
	}
	sum := sha256.Sum256(nil)
	for start := time.Now(); time.Since(start) < 500*time.Millisecond; {
		sum = sha256.Sum256(sum[:])
	}
	pprof.StopCPUProfile()
	f.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := Load(ctx, exe, path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Cum["crypto/sha256.Sum256"] <= 0 {
		t.Errorf("no time in crypto/sha256.Sum256; profile has %d functions", len(p.Cum))
	}
	if p.Total <= 0 || p.Duration <= 0 {
		t.Errorf("duration %v, total %v", p.Duration, p.Total)
	}
}

func FuzzParse(f *testing.F) {
	listing, err := os.ReadFile("testdata/respond-top.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(listing))
	f.Add("Duration: 1s, Total samples = 10ms (1%)\n 10ms 100% 100% 10ms 100%  main.f\n")
	f.Fuzz(func(t *testing.T, in string) {
		p, err := Parse(strings.NewReader(in))
		if err != nil {
			return
		}
		for name, d := range p.Cum {
			if name == "" || d < 0 {
				t.Fatalf("row %q %v", name, d)
			}
		}
		_ = Diff(p.PerUnit(1), p.PerUnit(2), 10, 0)
	})
}
