// Package sqlitetest opens a migrated SQLite store in a test's temporary
// directory, for the tests of packages that run on the SQLite store.
package sqlitetest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/idemgo/idem/store/sqlite"
)

// Open returns a store over a new file in t.TempDir(), migrated, closed when
// the test ends. It fails the test if the store cannot be opened or
// migrated.
func Open(t testing.TB) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "idem.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}
