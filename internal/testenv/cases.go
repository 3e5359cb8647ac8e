package testenv

import "testing"

// Case is one named behaviour of a shared test table, run on a fresh S
// (a store, a server) that the table's caller opens.
type Case[S any] struct {
	Name string
	Run  func(*testing.T, S)
}

// RunCases runs every case as a subtest of t, each on an S of its own from
// open: one table of behaviours, run by a module's own tests on store/memory
// and by its integration module on a real store.
func RunCases[S any](t *testing.T, open func(testing.TB) S, cases ...Case[S]) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) { c.Run(t, open(t)) })
	}
}
