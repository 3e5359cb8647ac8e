package storetest

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemgo/idem"
)

// WantSchemaError fails t unless err is an *idem.SchemaError (errors.Is
// idem.ErrSchemaMissing) that names each of want among its missing objects,
// says how to fix it (idem migrate), and is not permanent: a missing table
// is the store's failure, never a message's. Stores with a schema use it in
// their Migrate and CheckSchema tests.
func WantSchemaError(t testing.TB, what string, err error, want ...string) {
	t.Helper()
	var se *idem.SchemaError
	if !errors.As(err, &se) || !errors.Is(err, idem.ErrSchemaMissing) {
		t.Fatalf("%s = %v; want an *idem.SchemaError", what, err)
	}
	got := strings.Join(se.Missing, ", ")
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Fatalf("%s names %q; want %q among them", what, got, w)
		}
	}
	if !strings.Contains(err.Error(), "idem migrate") {
		t.Fatalf("%s = %v; want the fix (idem migrate) in the message", what, err)
	}
	if idem.IsPermanent(err) {
		t.Fatalf("%s = %v: permanent; want a store failure", what, err)
	}
}
