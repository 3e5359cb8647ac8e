package idem_test

import (
	"strings"
	"testing"

	"github.com/idemgo/idem"
)

func TestIsDedupID(t *testing.T) {
	withFP := idem.DedupID("order-1", "fp")
	tests := []struct {
		name, dedup, id string
		want            bool
	}{
		{"the id itself (no fingerprint)", "order-1", "order-1", true},
		{"the id with a digest", withFP, "order-1", true},
		{"another id's digest", idem.DedupID("order-2", "fp"), "order-1", false},
		{"a longer id sharing the prefix", "order-10", "order-1", false},
		{"a digest too short", "order-1~0123456789abcde", "order-1", false},
		{"a digest too long", "order-1~0123456789abcdef0", "order-1", false},
		{"upper-case hex", "order-1~0123456789ABCDEF", "order-1", false},
		{"not hex", "order-1~0123456789abcdeg", "order-1", false},
		{"a replay's id", idem.ReplayDedupID(withFP), "order-1", false},
		{"empty dedup id", "", "order-1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := idem.IsDedupID(tt.dedup, tt.id); got != tt.want {
				t.Fatalf("IsDedupID(%q, %q) = %v, want %v", tt.dedup, tt.id, got, tt.want)
			}
		})
	}
}

func TestReplayDedupID(t *testing.T) {
	orig := idem.DedupID("order-1", "fp")
	tests := []struct {
		name, id, wantOrig string
	}{
		{"a dedup id", orig, orig},
		{"a plain id", "order-1", "order-1"},
		{"an empty id", "", ""},
		{"a replay's id: back to the original's", idem.ReplayDedupID(orig), orig},
		{"an id holding the mark without a nonce", "a~replay-b", "a~replay-b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r1, r2 := idem.ReplayDedupID(tt.id), idem.ReplayDedupID(tt.id)
			if r1 == r2 {
				t.Fatalf("two replays of %q share the id %q", tt.id, r1)
			}
			for _, r := range []string{r1, r2} {
				if r == tt.id || r == tt.wantOrig {
					t.Fatalf("ReplayDedupID(%q) = %q, the original's: a duplicate window would drop it", tt.id, r)
				}
				if len(r) != len(tt.wantOrig)+len("~replay-")+16 || !strings.HasPrefix(r, tt.wantOrig+"~replay-") {
					t.Fatalf("ReplayDedupID(%q) = %q, want %q, ~replay- and 16 hex digits", tt.id, r, tt.wantOrig)
				}
				if got, ok := idem.OriginalDedupID(r); !ok || got != tt.wantOrig {
					t.Fatalf("OriginalDedupID(%q) = %q, %v; want %q, true", r, got, ok, tt.wantOrig)
				}
			}
		})
	}
}

func TestOriginalDedupID(t *testing.T) {
	tests := []struct {
		id, want string
		ok       bool
	}{
		{"order-1", "order-1", false},
		{"order-1~0123456789abcdef", "order-1~0123456789abcdef", false},
		{"order-1~replay-0123456789abcdef", "order-1", true},
		{"~replay-0123456789abcdef", "", true},
		{"order-1~replay-0123456789abcdef~replay-fedcba9876543210", "order-1~replay-0123456789abcdef", true},
		{"order-1~replay-0123456789ABCDEF", "order-1~replay-0123456789ABCDEF", false},
		{"order-1~replay-0123456789abcde", "order-1~replay-0123456789abcde", false},
		{"order-1~replay-0123456789abcdef-x", "order-1~replay-0123456789abcdef-x", false},
	}
	for _, tt := range tests {
		if got, ok := idem.OriginalDedupID(tt.id); got != tt.want || ok != tt.ok {
			t.Errorf("OriginalDedupID(%q) = %q, %v; want %q, %v", tt.id, got, ok, tt.want, tt.ok)
		}
	}
}
