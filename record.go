package idem

import "time"

// State is the lifecycle state of a record.
type State string

// Record states. Expiry is derived from ExpiresAt, never trusted to a TTL
// daemon alone, and only settled records (completed, released) expire.
const (
	// StateInProgress: a claim is held under a lease (two-phase mode).
	StateInProgress State = "in_progress"
	// StateCompleted: the message was processed; duplicates are skipped.
	StateCompleted State = "completed"
	// StateReleased: the owner gave the claim back after a failure; the next
	// claim takes it with a higher fencing token. Keeping the row (rather than
	// deleting it) keeps the token increasing, so a zombie holding an old token
	// can never complete over a later owner.
	StateReleased State = "released"
)

// Record is what a store holds for one key.
type Record struct {
	Scope       string
	ID          string // the stored id (Key.StoredID)
	DisplayID   string // the original id, for operators
	State       State
	Fingerprint string // hash of the immutable content; "" when not checked
	Result      []byte // replayed to duplicates
	Token       int64  // fencing token of the current owner; increases on every claim
	Attempts    int    // how many times the key was claimed
	LeaseUntil  time.Time
	ExpiresAt   time.Time // retention end; a settled record may be swept after it
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// Key returns the record's key (with the display id, which is the original id
// unless it was longer than MaxDisplayLen).
func (r Record) Key() Key {
	id := r.DisplayID
	if id == "" {
		id = r.ID
	}
	return Key{Scope: r.Scope, ID: id}
}

// Expired reports whether the record's retention has ended at now. Only
// settled records (completed, released) expire: an in-progress record never
// does, whatever its ExpiresAt. Once its lease ends it is stale
// (LeaseExpired), which the Stale policy decides (retake, park, reconcile);
// it is never reborn as a new lifetime nor swept, because a crashed run is
// what an operator must see and what a retake must continue.
func (r Record) Expired(now time.Time) bool {
	if r.State == StateInProgress {
		return false
	}
	return !r.ExpiresAt.IsZero() && !now.Before(r.ExpiresAt)
}

// LeaseExpired reports whether an in-progress record's lease has ended at now.
func (r Record) LeaseExpired(now time.Time) bool {
	return r.State == StateInProgress && !now.Before(r.LeaseUntil)
}
