package load

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Row is one unit of a load: a line of a file, a row of a query result.
type Row struct {
	// N is the row's position in the input, from 1 (a CSV's header is not
	// counted). Conflicts and errors name rows by it.
	N int
	// Line is the line of the input the row starts on, when the source
	// knows it (CSV); 0 otherwise.
	Line int
	// Key identifies the row across loads: a business key ("order 42"), or
	// a hash of the row's content when it has none (Hash). Rows with one key
	// are one row, written once.
	Key string
	// Fingerprint is a hash of the row's content that must not change under
	// its key: a row whose key is stored with another fingerprint is a
	// conflict, reported and not written. "" checks nothing.
	Fingerprint string
	// Values are the columns the writer writes.
	Values []any
}

// Source yields the rows of a load in order.
type Source interface {
	// Next returns the next row, or io.EOF after the last one. Any other
	// error ends the load.
	Next(ctx context.Context) (Row, error)
}

// SourceFunc adapts a function to Source.
type SourceFunc func(ctx context.Context) (Row, error)

// Next calls f.
func (f SourceFunc) Next(ctx context.Context) (Row, error) { return f(ctx) }

// RowError is a row a load cannot take: no key, a key the store cannot
// keep. It unwraps to the reason (idem.ErrNoKey, idem.ErrInvalidKey).
type RowError struct {
	Row  int // Row.N
	Line int // Row.Line, 0 when unknown
	Err  error
}

// Error names the row (and its line) and the reason.
func (e *RowError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("load: row %d (line %d): %v", e.Row, e.Line, e.Err)
	}
	return fmt.Sprintf("load: row %d: %v", e.Row, e.Err)
}

// Unwrap returns the reason.
func (e *RowError) Unwrap() error { return e.Err }

// Hash returns the SHA-256 (hex) of fields, each length-prefixed, so that
// ("ab","c") and ("a","bc") differ: the same value as idem.Fingerprint of
// the fields' bytes. Use it for fingerprints, and for keys of rows without a
// business key.
func Hash(fields ...string) string {
	var buf [256]byte
	sum, _ := hash(buf[:0], fields)
	return sum
}

// hash computes Hash in buf and returns buf, grown as needed, to use again.
func hash(buf []byte, fields []string) (string, []byte) {
	b := buf[:0]
	for _, f := range fields {
		l := uint64(len(f))
		for i := range 8 {
			b = append(b, byte(l>>(8*i)))
		}
		b = append(b, f...)
	}
	d := sha256.Sum256(b)
	return hex.EncodeToString(d[:]), b
}

// JoinKey joins the parts of a composite business key (tenant and order id)
// with "|", escaping "|" and "\" inside parts, so ("a|b","c") and
// ("a","b|c") stay two keys. It is the same joining as idem.Composite's.
func JoinKey(parts ...string) string {
	if len(parts) == 1 {
		return parts[0]
	}
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('|')
		}
		keyEscaper.WriteString(&b, p)
	}
	return b.String()
}

var keyEscaper = strings.NewReplacer(`\`, `\\`, `|`, `\|`)
