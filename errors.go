package idem

import (
	"errors"
	"fmt"
)

// Sentinel errors, checked with errors.Is.
var (
	// ErrNoKey means the message carries no usable key (missing or empty).
	ErrNoKey = errors.New("idem: message has no idempotency key")
	// ErrInvalidKey means a key or scope is malformed (bad characters, bad
	// CloudEvent, ...).
	ErrInvalidKey = errors.New("idem: invalid idempotency key")
	// ErrInProgress means another live owner holds the claim: do not ack,
	// retry later.
	ErrInProgress = errors.New("idem: key is in progress elsewhere")
	// ErrConflict means the key was seen before with different content.
	// It is never dropped silently: dead-letter the message and alert.
	ErrConflict = errors.New("idem: key reused with different content")
	// ErrStale means an in-progress record's lease has ended (its owner
	// probably crashed) and the stale policy parked it for an operator.
	ErrStale = errors.New("idem: stale in-progress record parked for an operator")
	// ErrLeaseLost means the caller's fencing token is no longer current:
	// its lease ended and another owner took the key over (or the record is gone).
	ErrLeaseLost = errors.New("idem: lease lost (stale fencing token)")
	// ErrNotFound means no record exists for the key.
	ErrNotFound = errors.New("idem: record not found")
	// ErrResultTooLarge means the handler's result exceeds Options.MaxResultSize.
	ErrResultTooLarge = errors.New("idem: result too large")
	// ErrPermanent marks handler errors that retrying cannot fix; see Permanent.
	ErrPermanent = errors.New("idem: permanent failure")
	// ErrNoTx means the guard's store has no transactional inbox for the
	// requested transaction type.
	ErrNoTx = errors.New("idem: store has no transactional inbox for this transaction type")
	// ErrDuplicate is returned by a handler (or an entity helper) that found
	// the message's effect already in place: the business row exists with the
	// same content. The guard reports OutcomeDuplicate and a nil error, so the
	// integration acks. See DuplicateError to pass the stored result along.
	ErrDuplicate = errors.New("idem: already processed")
	// ErrSuperseded is returned by a handler (or a version guard) when the
	// message carries a version older than or equal to the stored one. The
	// guard reports OutcomeSuperseded and a nil error: ack and skip.
	ErrSuperseded = errors.New("idem: superseded by a newer version")
	// ErrInvalidData means the store cannot take a value of the request (a
	// field its column rejects, a request without its times). It is
	// permanent: the same message would fail the same way forever, so it
	// is dead-lettered (reason invalid_data), never retried. See
	// InvalidDataError.
	ErrInvalidData = errors.New("idem: the store cannot take this data")
	// ErrNoRecords means a two-phase call (Do, DoKey, ClaimBatch) reached a
	// guard made by NewInbox, whose store keeps no records (entity mode):
	// nothing ran. Use DoTx with an entity insert. It is permanent (the
	// message is dead-lettered with reason no_records, never retried
	// forever): the wiring, not the message, must change.
	ErrNoRecords = errors.New("idem: the guard's store keeps no records")
	// ErrInvalidOptions means Options failed validation in New.
	ErrInvalidOptions = errors.New("idem: invalid options")
)

// ConflictError carries the stored record whose fingerprint differs from the
// message's. errors.Is(err, ErrConflict) is true.
type ConflictError struct {
	Key         Key
	Fingerprint string // the message's fingerprint
	Record      Record // what the store holds
}

// Error describes the conflict with short fingerprints.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("idem: key %s reused with different content (stored fingerprint %.12s, message %.12s)",
		e.Key, e.Record.Fingerprint, e.Fingerprint)
}

// Unwrap makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Unwrap() error { return ErrConflict }

// StateError reports a claim that did not acquire the key (in progress or
// parked) and carries the record. It unwraps to ErrInProgress or ErrStale.
type StateError struct {
	Key    Key
	Record Record
	Err    error // ErrInProgress or ErrStale
}

// Error names the state, the key and the current owner's token and lease.
func (e *StateError) Error() string {
	return fmt.Sprintf("%v: %s (token %d, lease until %s)", e.Err, e.Key, e.Record.Token,
		e.Record.LeaseUntil.UTC().Format("2006-01-02T15:04:05.000Z"))
}

// Unwrap returns ErrInProgress or ErrStale.
func (e *StateError) Unwrap() error { return e.Err }

// KeyError explains why a key could not be extracted or is invalid. It unwraps
// to ErrNoKey or ErrInvalidKey.
type KeyError struct {
	Reason string
	Err    error // ErrNoKey or ErrInvalidKey
}

// Error is the sentinel's text with the reason.
func (e *KeyError) Error() string { return e.Err.Error() + ": " + e.Reason }

// Unwrap returns ErrNoKey or ErrInvalidKey.
func (e *KeyError) Unwrap() error { return e.Err }

func noKey(format string, args ...any) error {
	return &KeyError{Reason: fmt.Sprintf(format, args...), Err: ErrNoKey}
}

func invalidKey(format string, args ...any) error {
	return &KeyError{Reason: fmt.Sprintf(format, args...), Err: ErrInvalidKey}
}

// permanentError marks an error as permanent.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() []error {
	return []error{e.err, ErrPermanent}
}

// Permanent wraps a handler error that retrying cannot fix (a malformed
// order, a rejected card). The guard releases the claim and reports it so the
// integration dead-letters the message instead of redelivering it forever.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err was wrapped with Permanent (or is a
// conflict, missing key, invalid key, data the store cannot take or a guard
// without records asked for two-phase work, which retrying cannot fix either).
func IsPermanent(err error) bool {
	return errors.Is(err, ErrPermanent) || errors.Is(err, ErrConflict) ||
		errors.Is(err, ErrNoKey) || errors.Is(err, ErrInvalidKey) || errors.Is(err, ErrInvalidData) ||
		errors.Is(err, ErrNoRecords)
}

// InvalidDataError is a store's refusal of the data it was given (PostgreSQL
// SQLSTATE class 22, MySQL's invalid-string and too-long errors, a Redis
// script rejecting its input, a request without its times). It unwraps to
// ErrInvalidData and to the store's own error. Stores classify their data
// errors with it; everything else a store returns stays retryable.
type InvalidDataError struct {
	Op  string // claim, complete, release, renew, mark, ...
	Err error  // the store's error
}

// Error names the operation and the store's error.
func (e *InvalidDataError) Error() string {
	return "idem: store " + e.Op + ": the store cannot take this data: " + e.Err.Error()
}

// Unwrap returns ErrInvalidData and the store's error.
func (e *InvalidDataError) Unwrap() []error { return []error{ErrInvalidData, e.Err} }

// StoreError wraps an error returned by the store (server down, timeout,
// failover). It is retryable: the message must not be acked.
type StoreError struct {
	Op  string // claim, complete, release, renew, get, sweep, mark
	Err error
}

// Error names the store operation that failed.
func (e *StoreError) Error() string { return "idem: store " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the store's error.
func (e *StoreError) Unwrap() error { return e.Err }

// DuplicateError is ErrDuplicate with the result to replay (for example what
// the existing business row holds).
type DuplicateError struct {
	Result []byte
}

// Error is ErrDuplicate's text.
func (e *DuplicateError) Error() string { return ErrDuplicate.Error() }

// Unwrap returns ErrDuplicate.
func (e *DuplicateError) Unwrap() error { return ErrDuplicate }

// skipOutcome recognises handler errors that mean "nothing to do": the effect
// exists already (ErrDuplicate) or a newer version was applied
// (ErrSuperseded). It returns the outcome and the result to report.
func skipOutcome(err error) (Outcome, []byte, bool) {
	switch {
	case errors.Is(err, ErrDuplicate):
		var de *DuplicateError
		if errors.As(err, &de) {
			return OutcomeDuplicate, de.Result, true
		}
		return OutcomeDuplicate, nil, true
	case errors.Is(err, ErrSuperseded):
		return OutcomeSuperseded, nil, true
	}
	return 0, nil, false
}
