// Package sqlname checks the table names the outbox stores are given: plain
// identifiers only (names that need quoting are almost always a mistake),
// short enough for the suffixes of the tables and indexes derived from
// them.
package sqlname

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/idemgo/idem/outbox"
)

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Split checks name, "table" or (with schemas) "schema.table", and returns
// its parts. Each part is a plain identifier; the table part leaves room
// for suffix within maxLen bytes. Errors wrap outbox.ErrInvalidOptions.
func Split(name string, schemas bool, maxLen int, suffix string) (schema, table string, err error) {
	bad := func(reason string) error {
		return fmt.Errorf("%w: table %q: %s", outbox.ErrInvalidOptions, name, reason)
	}
	parts := strings.Split(name, ".")
	switch {
	case len(parts) == 2 && !schemas:
		return "", "", bad("a plain table name, without a schema")
	case len(parts) > 2:
		return "", "", bad(`want "table" or "schema.table"`)
	}
	for _, p := range parts {
		if !identRE.MatchString(p) {
			return "", "", bad("each part must be letters, digits and underscores, not starting with a digit")
		}
		if len(p) > maxLen {
			return "", "", bad(fmt.Sprintf("a part is longer than %d bytes", maxLen))
		}
	}
	table = parts[len(parts)-1]
	if len(table)+len(suffix) > maxLen {
		return "", "", bad(fmt.Sprintf("the name leaves no room for the %q suffix of its derived tables (at most %d bytes)", suffix, maxLen-len(suffix)))
	}
	if len(parts) == 2 {
		schema = parts[0]
	}
	return schema, table, nil
}
