package cosmostest

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// tokKind is the kind of a query token.
type tokKind int

const (
	tEOF tokKind = iota
	tIdent
	tParam
	tNumber
	tString
	tPunct
)

type token struct {
	kind tokKind
	text string // identifier, parameter name (with @), punctuation, number text
	str  string // a string literal's value
	pos  int
}

// is reports whether t is the keyword or punctuation s (keywords in any
// case).
func (t token) is(s string) bool {
	return (t.kind == tIdent || t.kind == tPunct) && strings.EqualFold(t.text, s)
}

// lex splits a query into tokens.
func lex(src string) ([]token, error) {
	var out []token
	i := 0
	for i < len(src) {
		r, w := utf8.DecodeRuneInString(src[i:])
		switch {
		case unicode.IsSpace(r):
			i += w
		case r == '-' && strings.HasPrefix(src[i:], "--"):
			return nil, fmt.Errorf("comments at %d", i)
		case r == '_' || unicode.IsLetter(r) || r == '@':
			j := i + w
			for j < len(src) {
				r2, w2 := utf8.DecodeRuneInString(src[j:])
				if r2 != '_' && !unicode.IsLetter(r2) && !unicode.IsDigit(r2) {
					break
				}
				j += w2
			}
			k := tIdent
			if r == '@' {
				k = tParam
				if j == i+1 {
					return nil, fmt.Errorf("a parameter without a name at %d", i)
				}
			}
			out = append(out, token{kind: k, text: src[i:j], pos: i})
			i = j
		case r >= '0' && r <= '9':
			j := i
			for j < len(src) && (src[j] >= '0' && src[j] <= '9' || src[j] == '.' || src[j] == 'e' || src[j] == 'E' ||
				(src[j] == '-' || src[j] == '+') && (src[j-1] == 'e' || src[j-1] == 'E')) {
				j++
			}
			if _, err := strconv.ParseFloat(src[i:j], 64); err != nil {
				return nil, fmt.Errorf("the number %q at %d", src[i:j], i)
			}
			out = append(out, token{kind: tNumber, text: src[i:j], pos: i})
			i = j
		case r == '\'' || r == '"':
			s, n, err := lexString(src[i:])
			if err != nil {
				return nil, fmt.Errorf("the string at %d: %v", i, err)
			}
			out = append(out, token{kind: tString, str: s, text: src[i : i+n], pos: i})
			i += n
		default:
			for _, p := range []string{"!=", "<>", "<=", ">=", "(", ")", "[", "]", ",", ".", "*", "=", "<", ">", "-"} {
				if strings.HasPrefix(src[i:], p) {
					out = append(out, token{kind: tPunct, text: p, pos: i})
					i += len(p)
					goto next
				}
			}
			return nil, fmt.Errorf("the character %q at %d", r, i)
		next:
		}
	}
	return append(out, token{kind: tEOF, pos: len(src)}), nil
}

// lexString reads a quoted string literal at the start of s, returning
// its value and its length in s.
func lexString(s string) (string, int, error) {
	q := s[0]
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == q:
			return b.String(), i + 1, nil
		case c != '\\':
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(s) {
			break
		}
		switch s[i] {
		case '\'', '"', '\\', '/':
			b.WriteByte(s[i])
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			if i+4 >= len(s) {
				return "", 0, fmt.Errorf("a short \\u escape")
			}
			n, err := strconv.ParseUint(s[i+1:i+5], 16, 32)
			if err != nil {
				return "", 0, fmt.Errorf("the escape \\u%s", s[i+1:i+5])
			}
			i += 4
			r := rune(n)
			if utf16.IsSurrogate(r) && i+6 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
				if lo, err := strconv.ParseUint(s[i+3:i+7], 16, 32); err == nil {
					if d := utf16.DecodeRune(r, rune(lo)); d != utf8.RuneError {
						r = d
						i += 6
					}
				}
			}
			b.WriteRune(r)
		default:
			return "", 0, fmt.Errorf("the escape \\%c", s[i])
		}
	}
	return "", 0, fmt.Errorf("no closing quote")
}
