// Package lincheck checks that a store's history of concurrent operations
// is linearizable against a model of the idem.Store contract.
package lincheck
