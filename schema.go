package idem

import (
	"errors"
	"strings"
)

// ErrSchemaMissing means an object of the store's schema is not there: its
// records table, or an index its sweep needs, was dropped (or never made)
// while the store's migration bookkeeping says it was created. It is a store
// failure, retryable and never a message's fault: no message can succeed
// until an operator runs `idem migrate` (or the store's Migrate), so it must
// be reported, not dead-lettered. See SchemaError.
var ErrSchemaMissing = errors.New("idem: the store's schema is missing objects")

// SchemaError names what is missing from a store's schema. Stores return it
// from their schema check (CheckSchema, `idem migrate --check`), from
// Migrate when it cannot recreate an object, and from any call that met a
// missing table at run time (Err is then the server's error). It unwraps to
// ErrSchemaMissing and Err.
type SchemaError struct {
	Missing []string // "table idem_records", "index idem_records_expires_at", ...
	Err     error    // the server's error, when a statement met the absence
}

// Error names the missing objects and the fix.
func (e *SchemaError) Error() string {
	s := "idem: store schema: missing " + strings.Join(e.Missing, ", ") + " (run `idem migrate`, or the store's Migrate, to recreate it)"
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrSchemaMissing and the server's error.
func (e *SchemaError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrSchemaMissing}
	}
	return []error{ErrSchemaMissing, e.Err}
}
