package idemhttp_test

import (
	"path/filepath"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/sqlite"
)

// stores are the stores the concurrency tests run on: the in-process one and
// the embedded SQLite file store.
var stores = []struct {
	name string
	open func(testing.TB) idem.Store
}{
	{"memory", func(testing.TB) idem.Store { return newStore() }},
	{"sqlite", openSQLite},
}

func openSQLite(t testing.TB) idem.Store {
	t.Helper()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "idem.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}
