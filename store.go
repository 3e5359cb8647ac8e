package idem

import (
	"context"
	"time"

	"github.com/idemgo/idem/internal/claimcheck"
)

// Store is the durable dedup store. Every method is one atomic step at the
// store: no interleaving of two callers may break the rules below. The
// conformance suite in store/storetest is the executable definition; every
// implementation runs it (storetest.Run).
//
// The rules every store holds, whatever deletes its records:
//
//   - Lifetime. Only settled records expire: a completed or released
//     record expires when its ExpiresAt has passed (Record.Expired); an
//     in-progress record never expires and is never swept, whatever its
//     ExpiresAt. While its lease is live it is held; once the lease has
//     ended it is stale, and a claim always reports it to the Stale policy
//     (ClaimStale, or a retake with Retaken), never starting a new lifetime
//     over it. A native expiry (a TTL) never removes an in-progress record.
//     Acquiring still writes ExpiresAt no earlier than LeaseUntil
//     (storekit.PrepareClaim raises it), and Renew carries ExpiresAt with
//     the lease it extends, so a record released late keeps its retention.
//     A completed record that is part of a live run (a job's finished step)
//     is kept as long as the run through Retainer, which every store of this
//     module implements.
//   - Tokens. A token names one claim for the whole life of the key, across
//     deletions (sweep, expiry, a cache restart without persistence): a
//     record created where none exists starts at ClaimRequest.NewToken, a
//     random number in [2^32, 2^52) (storekit.NewToken), and each reclaim of a
//     surviving record adds 1. A zombie's token therefore never matches a
//     later owner's. Fencing checks equality; the increase within a
//     lifetime is for humans.
//   - Content. The fingerprint of a record's first claim sticks to the key
//     until the record expires: releases and retakes keep it (a release
//     means "may be retried", never "content forgotten"). A record stored
//     without one takes the next claim's. Only an operator changes it, on
//     a settled record, through Superseder.
//   - One clock: the caller's. Every time a store compares or writes comes
//     from the request (Now, LeaseUntil, ExpiresAt, read from the guard's
//     Options.Clock); a store never decides a record's fate by its own
//     clock, and a native expiry (a Redis TTL) is set as the duration from
//     the request's Now, so a caller whose clock is hours off the server's
//     loses nothing. The callers of one scope must agree on the time: two
//     instances whose clocks differ by S see a lease end up to S apart, so
//     keep the fleet's skew (NTP: milliseconds) well below the margin
//     before its end at which a holder whose renewal has not answered
//     stops its handler (Lease/10; with the default 30 s lease, a skew up
//     to a second or two is safe).
//   - Data errors are permanent. A request the store cannot take (a request
//     without its times, a value its column rejects) is an
//     *InvalidDataError (errors.Is(err, ErrInvalidData)), which Decide
//     dead-letters; stores accept any fingerprint bytes (storekit.StoredFingerprint)
//     and any valid key. Store failures (down, timeout, deadlock) are
//     returned as they are and stay retryable.
//
// Errors: the sentinels ErrLeaseLost and ErrNotFound where stated,
// *InvalidDataError for data the store cannot take; anything else is a store
// failure, which callers treat as retryable.
type Store interface {
	// Claim takes the key or reports why not, in one atomic step. Stores
	// call storekit.PrepareClaim first (and return its error). With the record r
	// stored for req.Key (if any) and now = req.Now:
	//
	//   - no record, or r expired (r.Expired(now): r completed or released
	//     and r.ExpiresAt <= now; never an in-progress record): a fresh record
	//     {in_progress, Token r.Token+1 (req.NewToken when absent),
	//     Attempts 1, Fingerprint req.Fingerprint, no result}: ClaimAcquired.
	//   - r released: {in_progress, Token+1, Attempts+1, the stored
	//     Fingerprint kept (req.Fingerprint when it was empty), no result}:
	//     ClaimAcquired. The caller compares fingerprints after every claim.
	//   - r completed: unchanged, ClaimDuplicate.
	//   - r in progress and now < r.LeaseUntil: unchanged, ClaimInProgress.
	//   - r in progress and its lease ended (stale, however long ago, its
	//     ExpiresAt passed or not): with req.TakeOverStale, {Token+1,
	//     Attempts+1, stored Fingerprint kept}: ClaimAcquired with Retaken;
	//     without it, unchanged, ClaimStale.
	//
	// Acquiring sets LeaseUntil = req.LeaseUntil, ExpiresAt = req.ExpiresAt,
	// UpdatedAt = now (CreatedAt = now for fresh records). Claim returns the
	// record as it is after the step.
	Claim(ctx context.Context, req ClaimRequest) (Claim, error)

	// Complete marks an in-progress record completed with its result and new
	// retention, only if req.Token is the current token and the state is
	// in_progress; otherwise ErrLeaseLost. Stores call storekit.PrepareComplete first.
	// Completing after the lease ended is allowed while nobody has taken the key over: the token still matches.
	Complete(ctx context.Context, req CompleteRequest) error

	// Release gives an in-progress claim back (state released, lease ended)
	// so a redelivery can claim it with a higher token. Only the current
	// token may release; otherwise ErrLeaseLost. Stores call
	// storekit.PrepareRelease first.
	Release(ctx context.Context, req ReleaseRequest) error

	// Renew extends the lease of an in-progress claim held with the current
	// token to req.LeaseUntil, and its ExpiresAt to at least that;
	// otherwise ErrLeaseLost. Stores call storekit.PrepareRenew first.
	Renew(ctx context.Context, req RenewRequest) error

	// Get returns the record for key (expired or not), or ErrNotFound.
	Get(ctx context.Context, key Key) (Record, error)

	// Sweep deletes at most req.Limit records that are expired at req.Now
	// (Record.Expired: completed or released, never an in-progress record,
	// live or stale: a stale record is what an operator must see) and
	// returns how many it deleted; a Limit of zero or less deletes none.
	// It must not block claims for long: one small batch per call. Stores shared by several instances make sure one
	// instance sweeps at a time (an advisory lock), returning 0 elsewhere.
	Sweep(ctx context.Context, req SweepRequest) (int, error)
}

// ClaimRequest asks a store to claim a key.
type ClaimRequest struct {
	Key           Key
	Fingerprint   string
	Now           time.Time
	LeaseUntil    time.Time // end of the in-progress lease (seconds away)
	ExpiresAt     time.Time // end of retention (days away); never zero
	TakeOverStale bool      // retake in-progress records whose lease ended

	// NewToken is the fencing token of a record this claim creates (the
	// key's first claim, or the first after its record was deleted).
	// Zero: storekit.PrepareClaim draws one.
	NewToken int64

	// checked is the key and fingerprint the guard that made the request
	// checked; storekit.PrepareClaim does not check them again while the
	// request carries them unchanged.
	checked checkedClaim
}

// checkedClaim is what a guard checked of a claim request it made: its
// key and fingerprint, and in the first request of a batch whose keys the
// guard found distinct (Guard.ClaimBatch), the batch (its first element
// and length).
type checkedClaim struct {
	key   Key
	fp    string
	batch *ClaimRequest
	n     int
}

// isChecked reports whether r's key and fingerprint are the ones the guard
// that made r checked.
func (r *ClaimRequest) isChecked() bool {
	// Equal strings that share their bytes compare by pointer.
	return r.checked.key.Scope != "" && r.checked.key == r.Key && r.checked.fp == r.Fingerprint
}

// checkedBatch reports whether reqs is, unchanged, a batch whose keys a
// guard found distinct.
func checkedBatch(reqs []ClaimRequest) bool {
	if len(reqs) == 0 || reqs[0].checked.batch != &reqs[0] || reqs[0].checked.n != len(reqs) {
		return false
	}
	for i := range reqs {
		if !reqs[i].isChecked() {
			return false
		}
	}
	return true
}

func init() {
	claimcheck.Checked = func(r ClaimRequest) bool { return r.isChecked() }
	claimcheck.CheckedBatch = checkedBatch
	claimcheck.ReadsDefaults = func(g any) bool {
		gg, ok := g.(*Guard)
		return ok && gg.opts.defaultReads
	}
}

// ClaimOutcome says what a claim found.
type ClaimOutcome int

// Claim outcomes.
const (
	ClaimAcquired   ClaimOutcome = iota + 1 // the caller owns the key now
	ClaimDuplicate                          // completed before
	ClaimInProgress                         // another live owner holds it
	ClaimStale                              // in progress, lease ended, not taken over
)

// String is the claim outcome's name (acquired, duplicate, in_progress, stale).
func (o ClaimOutcome) String() string {
	switch o {
	case ClaimAcquired:
		return "acquired"
	case ClaimDuplicate:
		return "duplicate"
	case ClaimInProgress:
		return "in_progress"
	case ClaimStale:
		return "stale"
	}
	return "unknown"
}

// Claim is the answer to a ClaimRequest.
type Claim struct {
	Outcome ClaimOutcome
	Record  Record // the record after the claim
	Retaken bool   // acquired over an in-progress record whose lease had ended
}

// CompleteRequest completes a claim.
type CompleteRequest struct {
	Key       Key
	Token     int64
	Result    []byte
	Now       time.Time
	ExpiresAt time.Time
}

// ReleaseRequest releases a claim.
type ReleaseRequest struct {
	Key   Key
	Token int64
	Now   time.Time
}

// RenewRequest extends a lease.
type RenewRequest struct {
	Key        Key
	Token      int64
	Now        time.Time
	LeaseUntil time.Time
}

// SweepRequest deletes one batch of expired records.
type SweepRequest struct {
	Now   time.Time
	Limit int
}

// batchStore is storekit.BatchStore.
type batchStore interface {
	ClaimBatch(ctx context.Context, reqs []ClaimRequest) ([]Claim, error)
}

// ClaimBatch claims reqs in one round trip when s implements
// storekit.BatchStore, and one
// by one otherwise. Keys must be distinct (ErrDuplicateKeyInBatch), with
// or without a storekit.BatchStore.
func ClaimBatch(ctx context.Context, s Store, reqs []ClaimRequest) ([]Claim, error) {
	if err := checkBatchKeys("claim batch", reqs); err != nil {
		return nil, err
	}
	if bs, ok := s.(batchStore); ok {
		return bs.ClaimBatch(ctx, reqs)
	}
	out := make([]Claim, len(reqs))
	for i, r := range reqs {
		c, err := s.Claim(ctx, r)
		if err != nil {
			return nil, err
		}
		out[i] = c
	}
	return out, nil
}

// TxStore is implemented by stores with a transactional inbox over the
// transaction type Tx (*sql.Tx, pgx.Tx, ...): the dedup marker is written in
// the caller's business transaction, so commit makes both durable or neither.
// See DoTx and MarkTx.
type TxStore[Tx any] interface {
	// InTx begins a transaction, runs fn, and commits when fn returns nil,
	// rolling back otherwise.
	InTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error

	// Mark writes a completed marker for req.Key inside tx with a
	// conflict-free insert (never a caught unique violation: PostgreSQL aborts
	// the transaction on one). A concurrent transaction marking the same key
	// waits for the first to end and then sees its marker. Outcomes follow
	// Claim: absent, expired or released records give ClaimAcquired (the
	// marker is written, completed, with Token increased); completed
	// records give ClaimDuplicate; in-progress two-phase records give
	// ClaimInProgress or ClaimStale (never taken over inside a transaction,
	// and never expired, however old).
	Mark(ctx context.Context, tx Tx, req ClaimRequest) (Claim, error)

	// SaveResult stores the handler's result on the marker written by Mark
	// in the same transaction.
	SaveResult(ctx context.Context, tx Tx, key Key, result []byte) error
}

// markDeferrer is storekit.MarkDeferrer.
type markDeferrer[Tx any] interface {
	DeferMark(ctx context.Context, tx Tx, req ClaimRequest) (c Claim, deferred bool, err error)
}

// Inspector is implemented by stores that operators can list and count
// (the idem command's list and stats).
type Inspector interface {
	// List returns up to f.Limit records ordered by (scope, stored id),
	// compared bytewise, starting after f.After: paging with the last
	// record's Cursor visits every record once, whatever its id.
	List(ctx context.Context, f ListFilter) ([]Record, error)
	// Stats counts records by scope and state at now.
	Stats(ctx context.Context, now time.Time) ([]ScopeStats, error)
}

// ListFilter selects records for Inspector.List. Zero fields do not filter.
type ListFilter struct {
	Scope         string
	State         State
	StaleAt       time.Time // only in-progress records whose lease ended at StaleAt
	CreatedBefore time.Time // only records created before
	After         Cursor    // page after this: the previous page's last Record.Cursor(); zero: from the start
	Limit         int       // 0 or less: DefaultListLimit (see PageLimit)
}

// DefaultListLimit is the page size of a ListFilter without a Limit.
const DefaultListLimit = 100

// PageLimit is the number of records a List call returns at most: Limit, or
// DefaultListLimit when Limit is not positive.
func (f ListFilter) PageLimit() int {
	if f.Limit <= 0 {
		return DefaultListLimit
	}
	return f.Limit
}

// ScopeStats counts the records of one scope.
type ScopeStats struct {
	Scope            string
	InProgress       int64
	Completed        int64
	Released         int64
	Stale            int64     // in progress with the lease ended (never Expired)
	Expired          int64     // settled, retention ended, waiting for a sweep
	OldestInProgress time.Time // zero when none
}
