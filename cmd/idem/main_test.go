package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// runCmd runs the command line in-process and returns its exit status and
// output.
func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// decode parses stdout as one JSON object.
func decode(t *testing.T, stdout string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(stdout), &m); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
	}
	return m
}

func TestUsageErrors(t *testing.T) {
	t.Setenv("IDEM_STORE", "")
	for _, tc := range []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"unknown command", []string{"frobnicate"}, "unknown command"},
		{"unknown flag", []string{"demo", "--frob"}, "unknown flag"},
		{"bad flag value", []string{"demo", "--messages", "many"}, "invalid argument"},
		{"rate out of range", []string{"demo", "--crash-rate", "2"}, "--crash-rate"},
		{"no consumers", []string{"demo", "--consumers", "0"}, "--consumers"},
		{"broker not supported", []string{"demo", "--broker", "kafka://127.0.0.1:9092"}, "not supported"},
		{"kafka in-process only", []string{"demo", "--broker", "kafka://127.0.0.1:9092"}, "in-process only (--broker kafka)"},
		{"broker scheme unknown", []string{"demo", "--broker", "http://x"}, "nats://"},
		{"demo store scheme unknown", []string{"demo", "--store", "cassandra://x", "--messages", "1"}, "unknown store scheme"},
		{"no store", []string{"stats"}, "IDEM_STORE"},
		{"dsn without scheme", []string{"stats", "--store", "idem.db"}, "no scheme"},
		{"unknown scheme", []string{"list", "--store", "cassandra://localhost"}, "available: "},
		{"show needs two args", []string{"show", "billing", "--store", "memory://"}, "accepts 2 arg"},
		{"resolve needs an action", []string{"resolve", "billing", "k", "--store", "memory://"}, "--complete or --release"},
		{"resolve needs one action", []string{"resolve", "billing", "k", "--complete", "--release", "--store", "memory://"}, "exactly one"},
		{"list bad state", []string{"list", "--state", "done", "--store", "memory://"}, "in_progress, completed or released"},
		{"list after a plain id", []string{"list", "--after", "order-2", "--store", "memory://"}, "not a page cursor"},
		{"demo tx mode without an inbox", []string{"demo", "--store", "memory://", "--mode", "tx", "--messages", "1"}, "no transactional inbox"},
		{"bench bad mode", []string{"bench", "--store", "memory://", "--mode", "fast"}, "--mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCmd(t, tc.args...)
			if code != exitUsage {
				t.Errorf("exit status %d, want %d; stderr:\n%s", code, exitUsage, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, stderr)
			}
		})
	}
}

func TestHelpHasExamples(t *testing.T) {
	code, out, _ := runCmd(t, "--help")
	if code != exitOK || !strings.Contains(out, "Examples:") {
		t.Fatalf("idem --help: status %d\n%s", code, out)
	}
	for _, c := range newRoot(nil, nil).Commands() {
		if c.Name() == "help" {
			continue
		}
		code, out, _ := runCmd(t, c.Name(), "--help")
		if code != exitOK || !strings.Contains(out, "Examples:") || !strings.Contains(out, "idem "+c.Name()) {
			t.Errorf("idem %s --help: status %d, want an example using the command\n%s", c.Name(), code, out)
		}
	}
}
