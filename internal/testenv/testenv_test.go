package testenv

import (
	"bytes"
	"net"
	"strings"
	"testing"
)

// TestNeedSkipsWithOneLinePerServer: a server that does not answer skips
// each test that needs it, and prints one line for all of them naming the
// server, its variable and how to start it.
func TestNeedSkipsWithOneLinePerServer(t *testing.T) {
	t.Setenv("IDEM_REQUIRE_SERVICES", "")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing answers there now
	s := Service{"Test server", "IDEM_TESTENV_PROBE_ADDR", addr, "testd --port 1"}
	var out bytes.Buffer
	old := summaryOut
	summaryOut = &out
	t.Cleanup(func() { summaryOut = old })
	for i := range 3 {
		ran := false
		t.Run("needs", func(t *testing.T) {
			s.Need(t)
			ran = true
		})
		if ran {
			t.Fatalf("run %d: Need returned for a closed port instead of skipping", i)
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one skip line for three skips, got %d: %q", len(lines), out.String())
	}
	for _, want := range []string{"Test server", addr, "IDEM_TESTENV_PROBE_ADDR", "testd --port 1"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("skip line %q lacks %q", lines[0], want)
		}
	}
}
