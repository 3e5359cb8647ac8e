package postgres

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
)

// DefaultTable is the table used when Options.Table is empty.
const DefaultTable = "idem_records"

// DefaultFillFactor leaves a fifth of every heap page free so that the
// update completing a claim can usually stay on the page of the row it
// replaces (a HOT update: no new index entries). See the package doc.
const DefaultFillFactor = 80

// MaxPartitions bounds Options.Partitions.
const MaxPartitions = 256

// Options configure a Store. The zero value works: table idem_records in the
// connection's search path, a plain (unpartitioned) table.
type Options struct {
	// Table is the records table, optionally schema-qualified
	// ("idem.records"). Each part must be a plain SQL identifier (letters,
	// digits, underscores, not starting with a digit). Migrate creates the
	// table, its sweep index and a migrations table named Table+"_migrations"
	// in the same schema; the schema itself must exist. Default idem_records.
	Table string

	// Partitions, when >= 2, makes Migrate create the table hash-partitioned
	// on (scope, id) into that many partitions: each partition is vacuumed,
	// indexed and swept on its own, which keeps maintenance of a very large
	// table in small pieces. 0 (the default) creates a plain table. It only
	// matters the first time Migrate creates the table.
	Partitions int

	// FillFactor is the heap fillfactor (10..100) Migrate creates the table
	// with. Default DefaultFillFactor (80).
	FillFactor int

	// MarkWithFirstStatement makes idem.DoTx send the marker in one batch
	// with BEGIN and the handler's first statement, instead of with BEGIN
	// ahead of the handler: the inbox then costs the business transaction
	// no round trip at all (see BENCH.md for what that is worth).
	//
	// The price is that the handler starts before the marker's answer is
	// known. For a key that is new (almost every message) nothing else
	// changes. For a key already recorded, the handler's first statement
	// (Exec, QueryRow or any other call on the tx) returns an error
	// wrapping ErrRerun, the transaction rolls back, and DoTx runs again
	// the ordinary way, where the duplicate is skipped (or the expired
	// record taken over and the handler run in full). So a handler must
	// tolerate running up to its first statement for a message it then
	// does not process, or runs twice: decoding and validating are fine,
	// a call to another service there is not. Nothing commits from the
	// abandoned run, and the outcome and result DoTx reports are those of
	// the ordinary path. Only the markers of keys guessed new are
	// deferred: a key the Store marked lately (a redelivery, most likely)
	// and every key while many of its recent markers met recorded keys (a
	// consumer restarting from an old offset) have their record read or
	// their marker sent first, so their handlers never start.
	//
	// Only DoTx defers its marker; Mark, MarkBatch and idem.MarkTx always
	// answer at once.
	MarkWithFirstStatement bool
}

// ErrInvalidTable is wrapped by errors about Options.Table.
var ErrInvalidTable = errors.New("postgres: invalid table name")

// OptionsError reports an invalid option. It unwraps to ErrInvalidTable (for
// Table) and to idem.ErrInvalidOptions.
type OptionsError struct {
	Field  string // "Table", "Partitions", "FillFactor"
	Value  string
	Reason string
}

// Error says which option is wrong and why.
func (e *OptionsError) Error() string {
	return fmt.Sprintf("postgres: invalid Options.%s %q: %s", e.Field, e.Value, e.Reason)
}

// Unwrap returns ErrInvalidTable for table errors and idem.ErrInvalidOptions
// in every case.
func (e *OptionsError) Unwrap() []error {
	if e.Field == "Table" {
		return []error{ErrInvalidTable, idem.ErrInvalidOptions}
	}
	return []error{idem.ErrInvalidOptions}
}

// identRE is deliberately narrower than what PostgreSQL accepts when quoted:
// names that need quoting are almost always a mistake (a stray space, a
// dash), and a plain name is the same in psql, in logs and in this package.
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// maxIdentLen is PostgreSQL's NAMEDATALEN-1; longer names are truncated
// silently by the server, which would make two tables collide.
const maxIdentLen = 63

// longestSuffix is the longest suffix added to the table name for derived
// objects ("_migrations"; partitions use "_p255", the sweep index "_sweep_idx").
const longestSuffix = len("_migrations")

// names holds the quoted identifiers derived from Options.Table.
type names struct {
	qualified  string // the table as given, unquoted, for messages and lock keys
	schema     string // "" when unqualified
	base       string
	table      string // quoted, schema-qualified as given
	migrations string // quoted
	sweepIndex string // quoted, unqualified (indexes live in the table's schema)
}

func (n names) derived(suffix string) string {
	if n.schema == "" {
		return pgx.Identifier{n.base + suffix}.Sanitize()
	}
	return pgx.Identifier{n.schema, n.base + suffix}.Sanitize()
}

func (o *Options) validate() (names, error) {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	tableErr := func(reason string) error {
		return &OptionsError{Field: "Table", Value: o.Table, Reason: reason}
	}
	parts := strings.Split(o.Table, ".")
	if len(parts) > 2 {
		return names{}, tableErr(`want "table" or "schema.table"`)
	}
	for _, p := range parts {
		if !identRE.MatchString(p) {
			return names{}, tableErr("each part must be letters, digits and underscores, not starting with a digit")
		}
		if len(p) > maxIdentLen {
			return names{}, tableErr(fmt.Sprintf("a part is longer than %d bytes", maxIdentLen))
		}
	}
	n := names{qualified: o.Table, base: parts[len(parts)-1]}
	if len(parts) == 2 {
		n.schema = parts[0]
	}
	if len(n.base)+longestSuffix > maxIdentLen {
		return names{}, tableErr(fmt.Sprintf("the table name leaves no room for the %q suffix of its migrations table (at most %d bytes)",
			"_migrations", maxIdentLen-longestSuffix))
	}
	n.table = n.derived("")
	n.migrations = n.derived("_migrations")
	n.sweepIndex = pgx.Identifier{n.base + "_sweep_idx"}.Sanitize()

	if o.Partitions < 0 || o.Partitions == 1 || o.Partitions > MaxPartitions {
		return names{}, &OptionsError{Field: "Partitions", Value: fmt.Sprint(o.Partitions),
			Reason: fmt.Sprintf("want 0 (a plain table) or 2..%d", MaxPartitions)}
	}
	if o.FillFactor == 0 {
		o.FillFactor = DefaultFillFactor
	}
	if o.FillFactor < 10 || o.FillFactor > 100 {
		return names{}, &OptionsError{Field: "FillFactor", Value: fmt.Sprint(o.FillFactor), Reason: "want 10..100"}
	}
	return n, nil
}
