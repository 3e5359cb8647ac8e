// Package claimcheck lets package storekit ask package idem whether the key
// and fingerprint of a claim request are the ones a guard checked as it
// made the request (Key.Validate, the fingerprint in its stored form), so
// that storekit.PrepareClaim does not check them a second time, nor
// storekit.CheckBatchKeys the keys of a batch the guard found distinct. It is a
// link between the two packages, not an API: idem cannot import storekit,
// which imports idem.
package claimcheck

// Checked is a func(idem.ClaimRequest) bool, set by package idem as it
// starts: true when the request's key and fingerprint are, unchanged, the
// ones the guard that made it checked. A request made or changed by anyone
// else answers false, and is checked in full.
var Checked any

// CheckedBatch is a func([]idem.ClaimRequest) bool, set by package idem:
// true when the requests are, unchanged, a batch whose keys the guard that
// made it found distinct (Guard.ClaimBatch).
var CheckedBatch any
