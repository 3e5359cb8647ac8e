package outbox

import (
	"context"
	"time"
)

// Store is the relay's side of an outbox table. Every method is one atomic
// step at the database. The conformance suite in outbox/outboxtest is the
// executable definition; every implementation runs it.
//
// Writing is the other side and is typed by the caller's transaction, so
// it is not part of this interface: each store has
//
//	Enqueue(ctx context.Context, tx Tx, msgs ...Message) error
//
// for its transaction type (*sql.Tx, pgx.Tx), which calls Prepare and
// writes the records in tx with a conflict-free insert: an id already held
// with the same fingerprint is the same message and is left alone (a
// handler run twice enqueues once); with another fingerprint the call
// returns a *ConflictError and writes nothing. Messages with an ordering
// key are given their Seq under a lock on the key that lasts until the
// transaction ends, so that per key, Seq order is commit order.
//
// Times come from the caller (the relay's clock), never the database's.
type Store interface {
	// Fetch returns up to req.Limit records ready at req.Now, by ascending
	// Seq: pending, not parked, NextAttemptAt <= Now, not in req.Exclude,
	// and with no earlier pending record of the same ordering key that is
	// parked or not due.
	Fetch(ctx context.Context, req FetchRequest) ([]Record, error)

	// MarkPublished records that the broker confirmed the records seqs at
	// now. Seqs already marked, or gone, are ignored.
	MarkPublished(ctx context.Context, seqs []int64, now time.Time) error

	// MarkFailed records failed publishes: each record's Attempts,
	// NextAttemptAt, LastError and Parked as given, if it is still
	// pending.
	MarkFailed(ctx context.Context, fs []Failure) error

	// Lease takes or renews the relay lease, the right to publish from
	// this outbox: one relay at a time across every instance. With no
	// lease held, or the held one ended (Until <= req.Now), req.Owner takes
	// it with a new token, higher than any before; held by req.Owner
	// with req.Token, it is renewed to req.Until with that token. Otherwise
	// the lease is left alone. The answer is the lease as it is after the
	// step; req.Owner holds it when Held(req.Owner, req.Now).
	Lease(ctx context.Context, req LeaseRequest) (Lease, error)

	// ReleaseLease ends the lease if req.Owner holds it with req.Token, so
	// another instance can take it over at once.
	ReleaseLease(ctx context.Context, req LeaseRequest) error

	// Cleanup deletes up to req.Limit records published before req.Before
	// (pending and parked records are never deleted) and returns how many
	// it deleted; a Limit of zero or less deletes none.
	Cleanup(ctx context.Context, req CleanupRequest) (int, error)
}

// FetchRequest asks for a batch of records to publish.
type FetchRequest struct {
	Now   time.Time
	Limit int
	// Exclude are records not to return: the relay's previous batch, whose
	// outcomes it is writing meanwhile. (Records behind them in their
	// ordering keys are returned; the relay holds them back itself.)
	Exclude []int64
}

// Failure is one failed publish.
type Failure struct {
	Seq           int64
	Attempts      int       // the record's failed attempts, this one included
	NextAttemptAt time.Time // when to try again
	Error         string    // the publish error, one line (OneLine)
	Park          bool      // do not try again until an operator retries it
}

// LeaseRequest takes, renews or releases the relay lease.
type LeaseRequest struct {
	Owner string    // the relay instance
	Token int64     // the token of the lease held (renew, release); 0 to take
	Now   time.Time // the caller's clock
	Until time.Time // the end of the lease taken or renewed
}

// Lease is the relay lease as stored.
type Lease struct {
	Owner string
	Token int64 // increases with every new holder
	Until time.Time
}

// Held reports whether owner holds the lease at now.
func (l Lease) Held(owner string, now time.Time) bool {
	return l.Owner == owner && now.Before(l.Until)
}

// CleanupRequest deletes one batch of published records.
type CleanupRequest struct {
	Before time.Time // published before this
	Limit  int
}

// Notifier is implemented by stores that can wake the relay as soon as
// messages are committed (store/postgres with LISTEN/NOTIFY). The relay
// still polls, so a lost notification delays a message by at most
// RelayOptions.PollInterval.
type Notifier interface {
	// Listen calls wake after each commit of new messages until ctx ends
	// (then it returns nil) or the listening connection fails.
	Listen(ctx context.Context, wake func()) error
}

// Inspector is implemented by stores that operators can list, count and
// retry (the idem outbox commands).
type Inspector interface {
	// List returns up to f.Limit records by ascending Seq after f.AfterSeq.
	List(ctx context.Context, f ListFilter) ([]Record, error)
	// Stats counts the outbox at now.
	Stats(ctx context.Context, now time.Time) (Stats, error)
	// Retry makes parked records pending again with no attempts counted
	// and NextAttemptAt = req.Now: the seqs given, or every parked record
	// when req.Seqs is empty. It returns how many it changed.
	Retry(ctx context.Context, req RetryRequest) (int, error)
}

// State selects records in ListFilter.
type State string

// States of a record.
const (
	StatePending   State = "pending"   // not confirmed by the broker, not parked
	StateParked    State = "parked"    // parked for an operator
	StatePublished State = "published" // confirmed, kept until the retention ends
)

// State is the record's state.
func (r Record) State() State {
	switch {
	case !r.Pending():
		return StatePublished
	case r.Parked:
		return StateParked
	}
	return StatePending
}

// ListFilter selects records for Inspector.List. Zero fields do not filter.
type ListFilter struct {
	State       State
	Destination string
	OrderingKey string
	AfterSeq    int64
	Limit       int // 0 or less: 100
}

// PageLimit is the number of records a List call returns at most.
func (f ListFilter) PageLimit() int {
	if f.Limit <= 0 {
		return 100
	}
	return f.Limit
}

// Match reports whether r passes f's filters (not Limit). Stores that
// filter in Go use it.
func (f ListFilter) Match(r Record) bool {
	return (f.State == "" || r.State() == f.State) &&
		(f.Destination == "" || r.Destination == f.Destination) &&
		(f.OrderingKey == "" || r.OrderingKey == f.OrderingKey) &&
		r.Seq > f.AfterSeq
}

// Stats counts an outbox.
type Stats struct {
	Pending       int64     // not published, not parked
	Parked        int64     // parked for an operator
	Published     int64     // confirmed, not cleaned up yet
	OldestPending time.Time // CreatedAt of the oldest pending record (parked ones aside); zero when none
	Lease         Lease     // the relay lease as stored (zero: never taken)
}

// Lag is the age at now of the oldest pending record (zero when none):
// how far the relay is behind. Parked records are counted apart.
func (s Stats) Lag(now time.Time) time.Duration {
	if s.OldestPending.IsZero() {
		return 0
	}
	return max(now.Sub(s.OldestPending), 0)
}

// RetryRequest makes parked records pending again.
type RetryRequest struct {
	Seqs []int64 // empty: every parked record
	Now  time.Time
}
