// Package claimcheck lets package storekit ask package idem whether the key
// and fingerprint of a claim request are the ones a guard checked as it
// made the request (Key.Validate, the fingerprint in its stored form), so
// that storekit.PrepareClaim does not check them a second time, nor
// storekit.CheckBatchKeys the keys of a batch the guard found distinct. It is a
// link between the two packages, not an API: idem cannot import storekit,
// which imports idem. It also lets package store/memory tell idem that a
// store is in memory (InMemory), and a broker adapter ask idem what of a
// message a guard reads (ReadsDefaults).
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

// InMemory is set by package store/memory as it starts: true for its
// Store, whose every call answers from memory without waiting on I/O, so
// that a guard over it bounds no call of it with Options.StoreTimeout (a
// deadline read the clock at every call, and could never end one: the
// store checks its context as a call begins, microseconds after the guard
// made it, and nothing of it waits on the context after that). A store
// wrapping one is not known to be in memory, and is bounded as any other.
var InMemory func(store any) bool

// ReadsDefaults is a func(*idem.Guard) bool (taking any), set by package
// idem: true when the guard's Key, Fingerprint and Correlation options were
// all left to their defaults, so that of a message it reads only the ID,
// the payload, the CorrelationID and the traceparent header (through
// Message.Header). A consumer whose handler hands the message to nobody
// else can then leave out the rest of the headers, whose map was a
// visible share of a record's cost (broker/kafka).
var ReadsDefaults func(g any) bool
