// Package lincheck checks that a store's history of concurrent operations
// is linearizable against a model of the idem.Store contract, with
// github.com/anishathalye/porcupine.
//
// Where store/storetest tests the contract case by case, lincheck lets
// eight goroutines call Claim (alone, or in a ClaimBatch when the store is
// an storekit.BatchStore), Complete, Release, Renew, Get, Sweep and
// Supersede (when the store is an idem.Superseder: an operator accepting
// another content) on four shared keys at random: with the token they
// hold, with stale ones (zombies), with the current owner's stolen from a
// record, and with tokens one off. Each call
// is recorded with its real call and return times, its request and the
// store's answer; porcupine then looks, key by key, for an order of the calls
// that is consistent with those times and in which every answer is the one
// the sequential contract gives: one owner per key, fencing by token,
// duplicates of completed records with their results, leases and retentions
// ended by the requests' clock, sweeps that delete only expired records,
// tokens +1 within a record's lifetime and
// ClaimRequest.NewToken for a record created where none is, fingerprints
// kept across releases and retakes and changed only by a Supersede of the
// settled record under its token.
//
// The requests' Now comes from a fake clock (the caller's clock is the one
// clock of idem), so leases of tens of milliseconds end within a few calls
// and the model is deterministic. A store may delete a record that has
// expired by the request's clock (a sweep, a Redis TTL): the model allows
// it, and the next claim then takes its NewToken. A call that fails with a
// store error or times out has an unknown outcome: it stays pending to the
// end of the history, so the check accepts it having taken effect at any
// moment after its call, or never.
//
// A store author runs it beside storetest.Run:
//
//	func TestLinearizable(t *testing.T) {
//		lincheck.Run(t, func(t *testing.T) idem.Store { return newIsolatedStore(t) }, lincheck.Options{})
//	}
//
// When a history is not linearizable the test fails with, for each offending
// key, the longest run of its calls the model explains (with the model's
// state after each) and the calls none of which can come next, and writes the
// key's whole history and porcupine's HTML visualization to files whose paths
// it prints.
//
// By default a run makes DefaultOps calls, under a second on a local server.
// The long form sets the number of calls with the -lincheck.ops flag or the
// IDEM_LINCHECK_OPS environment variable. Package stores (a module of its
// own, so that this one requires only idem and porcupine) runs it on every
// store of the repository:
//
//	go test ./store/storetest/lincheck/stores/ -run 'Test(Memory|SQLite|Postgres|MySQL|Redis|Mongo)$' -v -lincheck.ops=20000
package lincheck
