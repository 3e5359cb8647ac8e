package idem

import "errors"

// Outcome is what happened to one message.
type Outcome int

// Outcomes reported in Result and Event.
const (
	OutcomeProcessed  Outcome = iota + 1 // the handler ran and the record is completed
	OutcomeDuplicate                     // completed before: skipped, recorded result returned
	OutcomeInProgress                    // another live owner holds the key: retry later
	OutcomeConflict                      // same key, other content: dead-letter
	OutcomeStale                         // stale in-progress record parked for an operator
	OutcomeFailed                        // the handler failed: claim released, retry
	OutcomePermanent                     // the handler failed permanently: dead-letter
	OutcomeNoKey                         // no usable key and the policy rejects: dead-letter
	OutcomeUnkeyed                       // no key, processed without dedup (MissingKeyProcess)
	OutcomeReconciled                    // stale record completed by Options.Reconcile
	OutcomeLeaseLost                     // another owner took the key over, or the lease ran out before a renewal answered: retry
	OutcomeStoreError                    // the store failed: not acked, retry
	OutcomeSuperseded                    // a newer version was applied already: skipped (version guards)
)

var outcomeNames = map[Outcome]string{
	OutcomeProcessed: "processed", OutcomeDuplicate: "duplicate", OutcomeInProgress: "in_progress",
	OutcomeConflict: "conflict", OutcomeStale: "stale", OutcomeFailed: "failed",
	OutcomePermanent: "permanent", OutcomeNoKey: "no_key", OutcomeUnkeyed: "unkeyed",
	OutcomeReconciled: "reconciled", OutcomeLeaseLost: "lease_lost", OutcomeStoreError: "store_error",
	OutcomeSuperseded: "superseded",
}

// String is the outcome's name in logs and metrics (processed, duplicate, ...).
func (o Outcome) String() string {
	if s, ok := outcomeNames[o]; ok {
		return s
	}
	return "unknown"
}

// Result is what Guard.Do and DoTx return alongside their error.
type Result struct {
	Outcome Outcome
	Key     Key
	Value   []byte // the handler's result, or the recorded one for duplicates
	// Record is the stored record as the call left it, where one was read
	// (duplicate, conflict, in progress, stale, a claim of its own):
	// released after a failed two-phase handler whose claim was given
	// back; zero after a transactional inbox call whose marker rolled
	// back with its transaction.
	Record  Record
	Retaken bool // the key was taken over from a stale in-progress owner
}

// Action is what a broker integration does with a delivery.
type Action int

// Actions.
const (
	ActionAck        Action = iota + 1 // ack / commit: the record is durable
	ActionRetry                        // do not ack: nak with a delay, requeue, hold the partition
	ActionDeadLetter                   // dead-letter with the reason, then ack the original
)

// String is the action's name (ack, retry, dead_letter).
func (a Action) String() string {
	switch a {
	case ActionAck:
		return "ack"
	case ActionRetry:
		return "retry"
	case ActionDeadLetter:
		return "dead_letter"
	}
	return "unknown"
}

// Decide maps a call's outcome to the broker action every integration takes:
// ack only when the record is durable (processed, duplicate, superseded,
// unkeyed by choice); dead-letter what retrying cannot fix (conflicts,
// permanent errors, missing keys, parked records); retry everything else
// (in progress elsewhere, transient handler errors, store failures).
func Decide(res Result, err error) Action {
	switch {
	case err == nil:
		return ActionAck
	case errors.Is(err, ErrResultTooLarge) && res.Outcome == OutcomeProcessed:
		return ActionAck // effects committed; only the replayed result was dropped
	case IsPermanent(err), errors.Is(err, ErrStale):
		return ActionDeadLetter
	default:
		return ActionRetry
	}
}

// DeadLetterReason is a short machine-readable reason for a dead-letter
// header: conflict, no_key, invalid_key, parked, invalid_data, no_records, permanent, or "" when err
// should not be dead-lettered.
func DeadLetterReason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrConflict):
		return "conflict"
	case errors.Is(err, ErrNoKey):
		return "no_key"
	case errors.Is(err, ErrInvalidKey):
		return "invalid_key"
	case errors.Is(err, ErrStale):
		return "parked"
	case errors.Is(err, ErrInvalidData):
		return "invalid_data"
	case errors.Is(err, ErrNoRecords):
		return "no_records"
	case errors.Is(err, ErrPermanent):
		return "permanent"
	}
	return ""
}
