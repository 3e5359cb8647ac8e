// Package integration runs idemgrpc's behaviours that go through the store
// (idemgrpc/internal/idemgrpctest's Run and Bench) on the embedded SQLite
// store, as idemgrpc's own tests run them on store/memory. It is a module
// of its own, which no library module requires, so that store/sqlite and
// the SQLite driver stay out of the module graph of every user of idemgrpc.
package integration
