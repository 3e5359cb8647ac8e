package redisidem

import (
	"strings"
	"testing"

	"github.com/idemgo/idem"
)

// hashTag is the part of key Redis Cluster hashes: the text between the
// first '{' and the first '}' after it, when that is not empty.
func hashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

func TestKeyLayout(t *testing.T) {
	tests := []struct {
		scope, id, want string
	}{
		{"orders", "o-1", "idem:{orders:o-1}"},
		{"orders", "{hash}tag", "idem:{orders:%7Bhash%7Dtag}"},
		{"a:b", "c", "idem:{a%3Ab:c}"},
		{"a", "b:c", "idem:{a:b%3Ac}"},
		{"{", "}", "idem:{%7B:%7D}"},
		{"pct", "%7B", "idem:{pct:%257B}"},
		{"s", "star*?[x]", "idem:{s:star*?[x]}"},
		{"日本", "ünï", "idem:{日本:ünï}"},
	}
	seen := map[string]bool{}
	for _, tc := range tests {
		k := idem.Key{Scope: tc.scope, ID: tc.id}
		got := keyOf("idem", k)
		if got != tc.want {
			t.Errorf("keyOf(%q, %q) = %q, want %q", tc.scope, tc.id, got, tc.want)
		}
		if seen[got] {
			t.Errorf("key %q produced twice", got)
		}
		seen[got] = true
		// The tag is the whole escaped identity: user braces cannot move it.
		if tag := hashTag(got); tag != strings.TrimSuffix(strings.TrimPrefix(got, "idem:{"), "}") {
			t.Errorf("hash tag of %q = %q", got, tag)
		}
		scope, id, ok := parseKey("idem", got)
		if !ok || scope != tc.scope || id != tc.id {
			t.Errorf("parseKey(%q) = %q, %q, %v", got, scope, id, ok)
		}
	}
	if _, _, ok := parseKey("idem", lockKey("idem")); ok {
		t.Error("the sweep lock parses as a record key")
	}
}

func TestRecordPatternIsLiteral(t *testing.T) {
	if got := recordPattern("p", `st*r?[x]\`); got != `p:{st\*r\?\[x\]\\:*` {
		t.Fatalf("recordPattern = %q", got)
	}
	if got := recordPattern("p", "a:b"); got != "p:{a%3Ab:*" {
		t.Fatalf("recordPattern = %q", got)
	}
}

func FuzzKeyRoundTrip(f *testing.F) {
	for _, s := range []string{"", "{", "}", ":", "%", "%7B", "a{b}c:d%e"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, scope, id string) {
		if len(id) > idem.MaxIDLen {
			id = id[:idem.MaxIDLen]
		}
		k := keyOf("idem", idem.Key{Scope: scope, ID: id})
		tag := hashTag(k)
		if "idem:{"+tag+"}" != k || strings.ContainsAny(tag, "{}") {
			t.Fatalf("key %q has tag %q", k, tag)
		}
		s, i, ok := parseKey("idem", k)
		if !ok || s != scope || i != id {
			t.Fatalf("round trip of %q/%q via %q = %q/%q %v", scope, id, k, s, i, ok)
		}
	})
}
