package storekit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/claimcheck"
)

// StoredFingerprint is fp as stores keep it: fp itself when it is valid UTF-8
// text without NUL bytes of at most idem.MaxFingerprintLen bytes, else
// "sha256:" followed by the hex digest of its bytes. It is idempotent, so the
// guard and the store may both apply it: equal fingerprints stay equal,
// different ones stay different, and every store can keep any bytes a
// FingerprintFunc returns.
func StoredFingerprint(fp string) string {
	if len(fp) <= idem.MaxFingerprintLen && utf8.ValidString(fp) && !strings.ContainsRune(fp, 0) {
		return fp
	}
	sum := sha256.Sum256([]byte(fp))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// maxToken bounds the tokens NewToken draws: below 2^52, so that a token and
// the reclaims that add 1 to it stay exact in every store's arithmetic (Redis
// scripts count in IEEE doubles, exact to 2^53).
const maxToken = 1 << 52

// minToken keeps drawn tokens far from the small numbers a counter starting at
// 1 would produce, so a token from an older store version never matches one.
const minToken = 1 << 32

// NewToken draws the fencing token of a new record: a random number in
// [2^32, 2^52). A key whose record is deleted (swept, expired and purged, lost
// in a cache restart) and claimed again starts a new lifetime at a fresh
// random token, so a zombie from the earlier lifetime, whose token was drawn
// independently, never matches the new owner's: the chance that two lifetimes
// of one key overlap is about (claims per lifetime) / 2^52. Within a lifetime,
// each reclaim adds 1. It costs one call to math/rand/v2 (a few nanoseconds).
func NewToken() int64 {
	return minToken + rand.Int64N(maxToken-minToken)
}

// PrepareClaim checks a claim request before a store takes it and returns it
// as the store must write it: the fingerprint as StoredFingerprint keeps it,
// ExpiresAt raised to LeaseUntil (a claim released later keeps a retention no
// shorter than its lease; an in-progress record itself never expires), and
// NewToken drawn when zero. Every store calls it first in Claim, ClaimBatch
// and Mark. An invalid key is a *idem.KeyError; a request without its times
// is an *idem.InvalidDataError: permanent, never retried.
//
// The key and fingerprint of a request a guard made and checked are not
// checked again.
func PrepareClaim(r idem.ClaimRequest) (idem.ClaimRequest, error) {
	checked := guardChecked(r)
	if !checked {
		if err := r.Key.Validate(); err != nil {
			return r, err
		}
	}
	switch {
	case r.Now.IsZero():
		return r, invalidRequest("claim", "zero Now")
	case r.LeaseUntil.IsZero():
		return r, invalidRequest("claim", "zero LeaseUntil")
	case r.ExpiresAt.IsZero():
		return r, invalidRequest("claim", "zero ExpiresAt (every record has a retention end)")
	}
	if !checked {
		r.Fingerprint = StoredFingerprint(r.Fingerprint)
	}
	r.ExpiresAt = Later(r.ExpiresAt, r.LeaseUntil)
	if r.NewToken == 0 {
		r.NewToken = NewToken()
	}
	return r, nil
}

// PrepareComplete checks a complete request before a store takes it: a zero
// Now or ExpiresAt is an *idem.InvalidDataError.
func PrepareComplete(r idem.CompleteRequest) (idem.CompleteRequest, error) {
	switch {
	case r.Now.IsZero():
		return r, invalidRequest("complete", "zero Now")
	case r.ExpiresAt.IsZero():
		return r, invalidRequest("complete", "zero ExpiresAt (every record has a retention end)")
	}
	return r, nil
}

// PrepareRenew checks a renew request before a store takes it: a zero Now or
// LeaseUntil is an *idem.InvalidDataError.
func PrepareRenew(r idem.RenewRequest) (idem.RenewRequest, error) {
	switch {
	case r.Now.IsZero():
		return r, invalidRequest("renew", "zero Now")
	case r.LeaseUntil.IsZero():
		return r, invalidRequest("renew", "zero LeaseUntil")
	}
	return r, nil
}

// PrepareRelease checks a release request before a store takes it: a zero
// Now is an *idem.InvalidDataError.
func PrepareRelease(r idem.ReleaseRequest) (idem.ReleaseRequest, error) {
	if r.Now.IsZero() {
		return r, invalidRequest("release", "zero Now")
	}
	return r, nil
}

// guardChecked reports whether a guard made r and checked its key and
// fingerprint (package idem sets the test).
var guardChecked = claimcheck.Checked.(func(idem.ClaimRequest) bool)

// guardCheckedBatch reports whether a guard made reqs and found its keys
// distinct (package idem sets the test).
var guardCheckedBatch = claimcheck.CheckedBatch.(func([]idem.ClaimRequest) bool)

func invalidRequest(op, reason string) error {
	return &idem.InvalidDataError{Op: op, Err: fmt.Errorf("invalid request: %s", reason)}
}

// Later returns the later of a and b. Stores use it to carry a record's
// expiry with its lease.
func Later(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}
