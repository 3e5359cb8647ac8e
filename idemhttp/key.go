package idemhttp

import (
	"fmt"
	"strings"

	"github.com/idemgo/idem"
)

// HeaderKey is the request header that carries the client's idempotency key.
const HeaderKey = "Idempotency-Key"

// HeaderReplayed marks a response replayed from the record of an earlier
// request with the same key.
const HeaderReplayed = "Idempotent-Replayed"

// MaxKeyLen is the longest client key accepted, in characters after
// unquoting. Stripe and most APIs cap keys at 255.
const MaxKeyLen = 255

// ParseKey parses an Idempotency-Key header value.
//
// The draft (draft-ietf-httpapi-idempotency-key-header) defines the field as
// a Structured Field String (RFC 8941): `"8e03978e-40d5-43e8-bc93-6894a57f9324"`,
// quoted, with `\"` and `\\` as the only escapes and printable ASCII inside.
// Parameters after the string (`"k";a=1`) are parsed and ignored, as RFC 8941
// asks of unknown parameters. Most deployed APIs (Stripe among them) take the
// value bare, so a value that does not start with a quote is accepted as the
// key itself when it is 1..MaxKeyLen visible ASCII characters without spaces:
// `abc` and `"abc"` are the same key.
//
// The key must be 1..MaxKeyLen characters. Errors are *idem.KeyError
// wrapping idem.ErrInvalidKey.
func ParseKey(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return "", &idem.KeyError{Reason: HeaderKey + " is empty", Err: idem.ErrNoKey}
	}
	if v[0] != '"' {
		return parseBare(v)
	}
	key, rest, err := parseString(v)
	if err != nil {
		return "", err
	}
	if err := skipParams(rest); err != nil {
		return "", err
	}
	if key == "" {
		return "", invalid("the key is an empty string")
	}
	if len(key) > MaxKeyLen {
		return "", invalid("the key is %d characters long, the limit is %d", len(key), MaxKeyLen)
	}
	return key, nil
}

func parseBare(v string) (string, error) {
	if len(v) > MaxKeyLen {
		return "", invalid("the key is %d characters long, the limit is %d", len(v), MaxKeyLen)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c >= 0x7f {
			return "", invalid("a bare key holds visible ASCII characters only (byte %#02x at %d); quote it as a Structured Field string", c, i)
		}
	}
	return v, nil
}

// parseString parses an RFC 8941 sf-string at the start of v and returns its
// value and the text after the closing quote.
func parseString(v string) (key, rest string, err error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) {
				return "", "", invalid("the string ends inside an escape")
			}
			if v[i] != '"' && v[i] != '\\' {
				return "", "", invalid(`only \" and \\ may be escaped in a Structured Field string`)
			}
			b.WriteByte(v[i])
		case c == '"':
			return b.String(), v[i+1:], nil
		case c < 0x20 || c > 0x7e:
			return "", "", invalid("byte %#02x is not allowed in a Structured Field string", c)
		default:
			b.WriteByte(c)
		}
		if b.Len() > MaxKeyLen {
			return "", "", invalid("the key is longer than %d characters", MaxKeyLen)
		}
	}
	return "", "", invalid("the string has no closing quote")
}

// skipParams checks that rest is a list of RFC 8941 parameters
// (*( ";" *SP key [ "=" bare-item ] )) and ignores them.
func skipParams(rest string) error {
	for {
		rest = strings.TrimLeft(rest, " \t")
		if rest == "" {
			return nil
		}
		if rest[0] != ';' {
			return invalid("unexpected %q after the key string", clip(rest))
		}
		rest = strings.TrimLeft(rest[1:], " ")
		n := paramKeyLen(rest)
		if n == 0 {
			return invalid("malformed parameter %q", clip(rest))
		}
		rest = rest[n:]
		if rest == "" || rest[0] != '=' {
			continue
		}
		var err error
		if rest, err = skipBareItem(rest[1:]); err != nil {
			return err
		}
	}
}

// paramKeyLen is the length of the sf key at the start of s: ( lcalpha / "*" )
// *( lcalpha / DIGIT / "_" / "-" / "." / "*" ).
func paramKeyLen(s string) int {
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] == '*') {
		return 0
	}
	n := 1
	for n < len(s) {
		c := s[n]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		n++
	}
	return n
}

// skipBareItem skips one bare item (string, token, number, boolean or byte
// sequence) and returns what follows it.
func skipBareItem(s string) (string, error) {
	if s == "" {
		return "", invalid("a parameter has '=' and no value")
	}
	switch c := s[0]; {
	case c == '"':
		_, rest, err := parseString(s)
		return rest, err
	case c == '?':
		if len(s) < 2 || (s[1] != '0' && s[1] != '1') {
			return "", invalid("malformed boolean parameter")
		}
		return s[2:], nil
	case c == ':':
		end := strings.IndexByte(s[1:], ':')
		if end < 0 {
			return "", invalid("unterminated byte sequence parameter")
		}
		for _, b := range []byte(s[1 : end+1]) {
			if !(b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '+' || b == '/' || b == '=') {
				return "", invalid("malformed byte sequence parameter")
			}
		}
		return s[end+2:], nil
	case c == '-' || c >= '0' && c <= '9':
		n := 1
		for n < len(s) && (s[n] >= '0' && s[n] <= '9' || s[n] == '.') {
			n++
		}
		if s[n-1] == '-' || s[n-1] == '.' {
			return "", invalid("malformed number parameter")
		}
		return s[n:], nil
	case c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '*':
		n := 1
		for n < len(s) && isTokenChar(s[n]) {
			n++
		}
		return s[n:], nil
	}
	return "", invalid("malformed parameter value %q", clip(s))
}

func isTokenChar(c byte) bool {
	if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}

// FormatKey renders key as the draft's Structured Field string, escaping
// quotes and backslashes. Bytes outside printable ASCII, which the field
// cannot carry, are replaced by '?'.
func FormatKey(key string) string {
	var b strings.Builder
	b.Grow(len(key) + 2)
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// storedID combines the principal and the client's key into the id stored in
// the guard's scope. The principal comes first with '|' and '\' escaped, so
// the first unescaped '|' separates the two and no (principal, key) pair can
// collide with another.
func storedID(principal, key string) string {
	return escaper.Replace(principal) + "|" + key
}

var escaper = strings.NewReplacer(`\`, `\\`, `|`, `\|`)

func invalid(format string, args ...any) error {
	return &idem.KeyError{Reason: HeaderKey + ": " + fmt.Sprintf(format, args...), Err: idem.ErrInvalidKey}
}

func clip(s string) string {
	if len(s) > 20 {
		return s[:20] + "…"
	}
	return s
}
