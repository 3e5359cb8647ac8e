package redisidem

import (
	"fmt"
	"strings"

	"github.com/idemgo/idem"
)

// Key layout. One Redis string per record (format in record.go):
//
//	<prefix>:{<scope>:<stored id>}
//
// The braces are a Redis Cluster hash tag around the whole record identity:
// every command and script touches exactly that one key, records spread evenly over the
// slots (a tag of the scope alone would pile a busy consumer onto one node),
// and pipelines of claims fan out to every node. Scope and id are user text,
// so the characters that could end the tag early ('}'), open a second one
// ('{'), blur the scope/id boundary (':') or collide with the escape ('%')
// are percent-encoded inside it. The prefix may not contain braces at all.

// keyOf returns the Redis key of k's record under prefix.
func keyOf(prefix string, k idem.Key) string {
	scope, id := escape(k.Scope), escape(k.StoredID())
	var b strings.Builder
	b.Grow(len(prefix) + len(scope) + len(id) + 4)
	b.WriteString(prefix)
	b.WriteString(":{")
	b.WriteString(scope)
	b.WriteByte(':')
	b.WriteString(id)
	b.WriteByte('}')
	return b.String()
}

// parseKey recovers the scope and stored id from a record key under prefix.
func parseKey(prefix, key string) (scope, id string, ok bool) {
	rest, found := strings.CutPrefix(key, prefix+":{")
	if !found || !strings.HasSuffix(rest, "}") {
		return "", "", false
	}
	rest = rest[:len(rest)-1]
	s, i, found := strings.Cut(rest, ":")
	if !found {
		return "", "", false
	}
	if scope, ok = unescape(s); !ok {
		return "", "", false
	}
	if id, ok = unescape(i); !ok {
		return "", "", false
	}
	return scope, id, true
}

// recordPattern is the SCAN MATCH pattern for every record under prefix, or
// for the records of one scope when scope is not empty.
func recordPattern(prefix, scope string) string {
	if scope == "" {
		return prefix + ":{*"
	}
	return prefix + ":{" + globEscape(escape(scope)) + ":*"
}

// lockKey is the sweeper's advisory lock. It has no '{' so it never matches
// recordPattern.
func lockKey(prefix string) string { return prefix + ":sweep-lock" }

func needsEscape(c byte) bool { return c == '%' || c == '{' || c == '}' || c == ':' }

// escape percent-encodes the bytes that would break the key layout.
func escape(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if needsEscape(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := 0; i < len(s); i++ {
		if c := s[i]; needsEscape(c) {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// unescape reverses escape.
func unescape(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, true
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		hi, ok1 := unhex(s[i+1])
		lo, ok2 := unhex(s[i+2])
		if !ok1 || !ok2 {
			return "", false
		}
		b.WriteByte(hi<<4 | lo)
		i += 2
	}
	return b.String(), true
}

// globEscape makes s match itself literally in a SCAN MATCH pattern.
func globEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
