package load

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/idemgo/idem"
)

// Progress is where a load stands, reported after every batch it commits.
type Progress struct {
	Done                     int // rows read and settled so far
	Total                    int // Options.Total: rows expected; 0 when unknown
	New, Duplicate, Conflict int
	Elapsed                  time.Duration // since the load started (wall clock)
	Finished                 bool          // the last report of the load
}

// Rate is the load's speed so far, in rows per second.
func (p Progress) Rate() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Done) / p.Elapsed.Seconds()
}

// String renders the progress for a terminal:
// "120000/1000000 rows (12.0%), 85310 rows/s: 119998 new, 0 duplicate, 2 conflict".
func (p Progress) String() string {
	var b strings.Builder
	if p.Total > 0 {
		fmt.Fprintf(&b, "%d/%d rows (%.1f%%)", p.Done, p.Total, 100*float64(p.Done)/float64(p.Total))
	} else {
		fmt.Fprintf(&b, "%d rows", p.Done)
	}
	fmt.Fprintf(&b, ", %.0f rows/s: %d new, %d duplicate, %d conflict", p.Rate(), p.New, p.Duplicate, p.Conflict)
	return b.String()
}

// Terminal returns a Progress function that keeps one status line on w (a
// terminal: the line is rewritten with "\r"), at most ten times a second,
// and ends it with a newline when the load finishes.
func Terminal(w io.Writer) func(Progress) {
	var (
		mu   sync.Mutex
		last time.Time
	)
	return func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		if !p.Finished && time.Since(last) < 100*time.Millisecond {
			return
		}
		last = time.Now()
		end := ""
		if p.Finished {
			end = "\n"
		}
		fmt.Fprintf(w, "\r\x1b[K%s%s", p, end)
	}
}

// Conflict is a row whose key is stored with other content. The row was not
// written, and what is stored was left as it is.
type Conflict struct {
	Row         int    // the row's Row.N
	Line        int    // the row's Row.Line (0 when unknown)
	Key         string // the row's key
	Fingerprint string // the row's fingerprint
	Stored      string // the fingerprint stored under the key
	// Earlier is the N of the row of this same input that holds the key,
	// when it is in the same batch (a file that repeats a key with other
	// content); 0 when the key was stored before.
	Earlier int
}

// String describes the conflict: "row 7 (line 8): key o-42 exists with other content".
func (c Conflict) String() string {
	where := fmt.Sprintf("row %d", c.Row)
	if c.Line > 0 {
		where += fmt.Sprintf(" (line %d)", c.Line)
	}
	if c.Earlier > 0 {
		return fmt.Sprintf("%s: key %s was loaded from row %d with other content", where, c.Key, c.Earlier)
	}
	return fmt.Sprintf("%s: key %s exists with other content (stored %.12s, row %.12s)", where, c.Key, c.Stored, c.Fingerprint)
}

// Summary is what a load did.
type Summary struct {
	Rows      int // rows read
	New       int // written by this load
	Duplicate int // stored before with the same content (or repeated in the input): not written again
	Conflict  int // stored with other content: not written, listed in Conflicts
	// Conflicts are the first Options.MaxConflicts conflicts, in input
	// order; Conflict counts them all.
	Conflicts []Conflict
	Elapsed   time.Duration
}

// String is a one-line account: "1000 rows in 1.2s: 998 new, 0 duplicate, 2 conflict".
func (s Summary) String() string {
	return fmt.Sprintf("%d rows in %v: %d new, %d duplicate, %d conflict",
		s.Rows, s.Elapsed.Round(time.Millisecond), s.New, s.Duplicate, s.Conflict)
}

// ConflictError is returned by a load that met conflicts, after every other
// row was settled: errors.Is(err, idem.ErrConflict) is true. The summary
// returned with it is complete.
type ConflictError struct {
	Count     int        // all conflicts
	Conflicts []Conflict // the first Options.MaxConflicts
}

// Error counts the conflicts and names the first.
func (e *ConflictError) Error() string {
	if len(e.Conflicts) == 0 {
		return fmt.Sprintf("load: %d rows conflict with stored content", e.Count)
	}
	return fmt.Sprintf("load: %d rows conflict with stored content; first: %s", e.Count, e.Conflicts[0])
}

// Unwrap returns idem.ErrConflict.
func (e *ConflictError) Unwrap() error { return idem.ErrConflict }
