package idem

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Cursor is a place in Inspector.List's order: the (scope, stored id) of the
// last record of a page, which the next page starts after. It holds the
// stored id exactly as the record has it, never an id to be hashed again, so
// pages over hashed ids (long ones, ones that begin with "sha256:") continue
// where they stopped. The zero Cursor is the start.
//
// Pass a cursor through a URL or a command line as its String and read it
// back with ParseCursor; the text is opaque, and round-trips exactly.
type Cursor struct {
	scope, id string
}

// ErrInvalidCursor is returned by ParseCursor for text that is not a cursor
// String wrote.
var ErrInvalidCursor = errors.New("idem: invalid page cursor")

// Cursor returns the cursor of the page that follows r: the next List call
// with ListFilter.After set to it starts at the record after r.
func (r Record) Cursor() Cursor { return Cursor{scope: r.Scope, id: r.ID} }

// IsZero reports whether c is the start (no page before it).
func (c Cursor) IsZero() bool { return c == Cursor{} }

// Scope is the scope of the record c follows. Stores read it to build their
// keyset condition.
func (c Cursor) Scope() string { return c.scope }

// StoredID is the stored id (Record.ID) of the record c follows: compare it
// with stored ids as it is, never through Key.StoredID.
func (c Cursor) StoredID() string { return c.id }

// Before reports whether c comes before r in List's order, (scope, stored
// id) compared bytewise: whether a page after c may hold r. The zero Cursor
// comes before every record.
func (c Cursor) Before(r Record) bool {
	if c.IsZero() || r.Scope != c.scope {
		return r.Scope > c.scope
	}
	return r.ID > c.id
}

// cursorVersion starts every encoded cursor, so the form can change without
// misreading older cursors (and the text always starts with 'A', never '-').
const cursorVersion = 1

// maxCursorText bounds the text ParseCursor decodes: the longest cursor a
// stored record has (a scope of MaxScopeLen bytes, a stored id of MaxIDLen),
// so a huge query parameter is refused before it is decoded.
var maxCursorText = base64.RawURLEncoding.EncodedLen(1 + binary.MaxVarintLen64 + MaxScopeLen + MaxIDLen)

// String is c's opaque text form: URL- and shell-safe (unpadded base64url
// of a version byte, the scope's length and the scope and stored id bytes),
// "" for the zero Cursor.
func (c Cursor) String() string {
	if c.IsZero() {
		return ""
	}
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(c.scope)+len(c.id))
	b = append(b, cursorVersion)
	b = binary.AppendUvarint(b, uint64(len(c.scope)))
	b = append(b, c.scope...)
	b = append(b, c.id...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// MarshalText is String, so a Cursor is a string in JSON.
func (c Cursor) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText is ParseCursor.
func (c *Cursor) UnmarshalText(b []byte) error {
	p, err := ParseCursor(string(b))
	if err != nil {
		return err
	}
	*c = p
	return nil
}

// ParseCursor reads a cursor from its String form; "" is the zero Cursor.
// Text that String could not have written for a stored record (not the
// encoding, an empty scope or id, a scope over MaxScopeLen bytes, a stored
// id over MaxIDLen, bytes that are not UTF-8 text without NUL, which no key
// can hold) is an ErrInvalidCursor.
func ParseCursor(s string) (Cursor, error) {
	if s == "" {
		return Cursor{}, nil
	}
	if len(s) > maxCursorText {
		return Cursor{}, fmt.Errorf("%w: %d bytes, longer than any cursor", ErrInvalidCursor, len(s))
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || len(b) == 0 || b[0] != cursorVersion {
		return Cursor{}, fmt.Errorf("%w: %.40q", ErrInvalidCursor, s)
	}
	n, w := binary.Uvarint(b[1:])
	rest := b[1+max(w, 0):]
	if w <= 0 || n == 0 || n > MaxScopeLen || n >= uint64(len(rest)) {
		return Cursor{}, fmt.Errorf("%w: %.40q: bad scope length", ErrInvalidCursor, s)
	}
	c := Cursor{scope: string(rest[:n]), id: string(rest[n:])}
	for _, part := range []string{c.scope, c.id} {
		if !utf8.ValidString(part) || strings.ContainsRune(part, 0) {
			return Cursor{}, fmt.Errorf("%w: %.40q: not text", ErrInvalidCursor, s)
		}
	}
	if len(c.id) > MaxIDLen {
		return Cursor{}, fmt.Errorf("%w: %.40q: stored id longer than %d bytes", ErrInvalidCursor, s, MaxIDLen)
	}
	return c, nil
}
