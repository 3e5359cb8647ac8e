package sqlite

import (
	"errors"
	"fmt"

	"github.com/idemgo/idem"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// dataErr returns err as an *idem.InvalidDataError for op when SQLite refused
// the request's data: a string or blob over SQLITE_LIMIT_LENGTH
// (SQLITE_TOOBIG), a datatype mismatch (SQLITE_MISMATCH) or a constraint the
// values broke (SQLITE_CONSTRAINT). The same message would fail the same way
// forever, so it is permanent. Everything else is returned unchanged and
// stays retryable: busy and locked databases (SQLITE_BUSY, SQLITE_LOCKED,
// ErrBusy), I/O errors, a full disk, a closed database, context errors.
func dataErr(op string, err error) error {
	if se := missingTable(err); se != nil {
		return fmt.Errorf("sqlite: %s: %w", op, se)
	}
	var se *sqlite.Error
	if err != nil && errors.As(err, &se) {
		switch se.Code() & 0xff { // the primary code of an extended one
		case sqlite3.SQLITE_TOOBIG, sqlite3.SQLITE_MISMATCH, sqlite3.SQLITE_CONSTRAINT:
			return &idem.InvalidDataError{Op: op, Err: err}
		}
	}
	return err
}
