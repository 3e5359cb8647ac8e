package idem

import (
	"context"
	"fmt"
	"time"
)

// StalePolicy says what a claim does with an in-progress record whose lease
// has ended: its owner crashed mid-way (between its side effect and
// Complete, perhaps), or stalled without renewing.
type StalePolicy int

// Stale policies.
const (
	// StaleDefault is the pattern's rule, and the zero value: a stale
	// record is reconciled when Options.Reconcile is given (StaleReconcile)
	// and parked for an operator otherwise (StalePark). An earlier attempt
	// may have done its side effect, so the handler is never run again
	// unasked. Options() reports the policy it chose.
	StaleDefault StalePolicy = iota
	// StaleRetake takes the key over with a higher fencing token and runs
	// the handler again. Choose it only when running the handler twice is
	// safe: every downstream call carries a key derived with DeriveKey (so
	// the downstream deduplicates the repeat), or the handler resumes from
	// its own durable progress (package job's steps). Without that, a crash
	// between the side effect and Complete repeats the side effect.
	StaleRetake
	// StaleReconcile takes the key over and asks Options.Reconcile whether
	// the previous owner's effect happened; if it did, the record is
	// completed without running the handler; if not, the handler runs.
	StaleReconcile
	// StalePark leaves the record alone and reports ErrStale: the message is
	// dead-lettered (reason parked) and an operator resolves the record
	// (idem resolve --complete or --release) before replaying it.
	StalePark
)

// String is the policy's name (default, retake, reconcile, park).
func (p StalePolicy) String() string {
	switch p {
	case StaleDefault:
		return "default"
	case StaleRetake:
		return "retake"
	case StaleReconcile:
		return "reconcile"
	case StalePark:
		return "park"
	}
	return fmt.Sprintf("StalePolicy(%d)", int(p))
}

// MissingKeyPolicy says what to do with a message that has no key.
type MissingKeyPolicy int

// Missing-key policies.
const (
	// MissingKeyReject reports ErrNoKey (dead-letter). The default.
	MissingKeyReject MissingKeyPolicy = iota
	// MissingKeyProcess runs the handler without dedup and reports
	// OutcomeUnkeyed: for consumers where an occasional duplicate is better
	// than a dead letter.
	MissingKeyProcess
)

// ReconcileFunc decides whether a stale owner's effect happened (look it up
// downstream: the payment provider, the mail log). Return done=true with the
// result to record to complete the key without running the handler;
// done=false to run the handler; an error to release the key and retry
// later. Its context carries the message's key, as a handler's does:
// KeyFromContext and DeriveKey work inside it, so the lookup can use the
// very key the previous owner's downstream call carried.
type ReconcileFunc func(ctx context.Context, stale Record) (result []byte, done bool, err error)

// Defaults for Options.
const (
	DefaultLease         = 30 * time.Second
	DefaultRetention     = 7 * 24 * time.Hour
	DefaultMaxResultSize = 64 << 10
)

// Options configure a Guard. The zero value works except for Scope, which
// names the consumer and is required: two consumers sharing one scope would
// block each other.
type Options struct {
	// Scope is the consumer identity (consumer group, queue, service name).
	Scope string
	// Key extracts the message's stable id. Default: MessageID.
	Key KeyFunc
	// Fingerprint hashes the immutable content. Default: PayloadFingerprint.
	// Use NoFingerprint to disable conflict detection.
	Fingerprint FingerprintFunc
	// Lease is how long an in-progress claim is held without renewal,
	// counted from when the claim (or renewal) was sent. Default 30s.
	// Handlers running longer get it renewed a third of the lease after
	// the last claim or renewal was sent (as soon as a slower answer
	// arrives). A handler whose lease comes within Lease/10 of its end with
	// no renewal answered (the store answers too slowly, or not at all) has
	// its context cancelled with cause ErrLeaseLost, so that it stops
	// before another instance can claim the key; a claim whose answer
	// arrives that late starts no handler. Lease/10 is the time a handler
	// has to stop and the clock skew the instances may have; a store must
	// answer in under about 0.45 Lease for long handlers to keep it.
	Lease time.Duration
	// Retention is how long completed records are kept. It must outlast the
	// broker's redelivery window, dead-letter replays included. Default 7 days.
	Retention time.Duration
	// Stale is the policy for in-progress records whose lease ended (an
	// owner that crashed between its side effect and Complete). Default
	// (StaleDefault): reconcile when Reconcile is set, else park for an
	// operator; StaleRetake only when a repeated handler is safe.
	Stale StalePolicy
	// Reconcile is required with StaleReconcile, and chooses it under
	// StaleDefault.
	Reconcile ReconcileFunc
	// MissingKey is the policy for messages without a key.
	MissingKey MissingKeyPolicy
	// MaxResultSize bounds the recorded result in bytes. Default 64 KiB;
	// negative: no result is recorded.
	MaxResultSize int
	// KeepPayload, when positive, keeps a copy of the first KeepPayload
	// bytes of each content that claims a key, beside its record (a record
	// of scope Scope+PayloadScopeSuffix, read with KeptPayload), so that an
	// operator deciding a conflict sees the content that holds the key
	// beside the dead letter's (idem dlq show, the console) before
	// accepting one of them (idem resolve --supersede). It costs a claim
	// and a complete on the store per new content, kept as long as
	// Retention; off by default. Only two-phase and DoTx calls with a
	// Message (not DoKey) keep one; DoTx keeps it after its commit.
	KeepPayload int
	// Observer receives one Event per message (logs, metrics, traces);
	// observers that also implement StartObserver or StepObserver see the
	// start of each message and the failed steps (renewals, releases).
	Observer Observer
	// Correlation extracts the message's correlation id, which every
	// observed event carries beside the key. Default: DefaultCorrelation
	// (the broker's correlation id, else the producer's W3C trace id).
	Correlation CorrelationFunc
	// Clock returns the current time; default time.Now. Every instance
	// sharing a store should have a synchronised clock (NTP): leases are
	// compared across instances. The guard times renewals with timers, on
	// real time: Clock gives the times written to records and is expected
	// to advance as real time does.
	Clock func() time.Time
	// StoreTimeout bounds every store call the guard makes: claims, batch
	// claims, renewals (a waiting ticket's too), completes, releases and
	// DoTx's marker. A call that hangs (a row lock held by another session,
	// a store that stopped answering) fails the message with a retryable
	// *StoreError after StoreTimeout instead of stalling the consumer.
	// Completes and releases run under it even when the caller's context
	// has ended, so a finished handler's record is still written on
	// shutdown. MarkTx runs in the caller's transaction, under the caller's
	// context. Default 10s. The calls of a store/memory Store, which
	// answer from memory and cannot hang, are not bounded.
	StoreTimeout time.Duration

	// realClock: Clock was left to its default (time.Now), so a reading the
	// guard takes for its own timing serves as a record time too: on a fast
	// store the clock is a visible share of the cost per message.
	realClock bool
	// payloadFP: Fingerprint was left to its default (PayloadFingerprint),
	// whose hex digest is in its stored form already.
	payloadFP bool
	// defaultReads: Key, Fingerprint and Correlation were all left to their
	// defaults, so the guard reads of a message its ID, its payload, its
	// CorrelationID and its traceparent header alone
	// (claimcheck.ReadsDefaults).
	defaultReads bool
}

func (o *Options) validate() error {
	if o.Scope == "" {
		return fmt.Errorf("%w: Scope is required (the consumer's identity, e.g. its consumer group)", ErrInvalidOptions)
	}
	if err := (Key{Scope: o.Scope, ID: "x"}).Validate(); err != nil {
		return fmt.Errorf("%w: Scope: %v", ErrInvalidOptions, err)
	}
	if o.Lease < 0 || o.Retention < 0 || o.KeepPayload < 0 {
		return fmt.Errorf("%w: Lease, Retention and KeepPayload must not be negative", ErrInvalidOptions)
	}
	if o.Lease == 0 {
		o.Lease = DefaultLease
	}
	if o.Lease < 10*time.Millisecond {
		return fmt.Errorf("%w: Lease %v is too short to renew", ErrInvalidOptions, o.Lease)
	}
	if o.Retention == 0 {
		o.Retention = DefaultRetention
	}
	if o.Retention < o.Lease {
		return fmt.Errorf("%w: Retention (%v) shorter than Lease (%v)", ErrInvalidOptions, o.Retention, o.Lease)
	}
	if o.Stale < StaleDefault || o.Stale > StalePark {
		return fmt.Errorf("%w: unknown stale policy %d", ErrInvalidOptions, o.Stale)
	}
	if o.Stale == StaleDefault {
		o.Stale = StalePark
		if o.Reconcile != nil {
			o.Stale = StaleReconcile
		}
	}
	if o.Stale == StaleReconcile && o.Reconcile == nil {
		return fmt.Errorf("%w: StaleReconcile needs a Reconcile function", ErrInvalidOptions)
	}
	o.defaultReads = o.Key == nil && o.Fingerprint == nil && o.Correlation == nil
	if o.Key == nil {
		o.Key = MessageID
	}
	o.payloadFP = o.Fingerprint == nil
	if o.Fingerprint == nil {
		o.Fingerprint = PayloadFingerprint
	}
	if o.MaxResultSize == 0 {
		o.MaxResultSize = DefaultMaxResultSize
	}
	if o.Correlation == nil {
		o.Correlation = DefaultCorrelation
	}
	o.realClock = o.Clock == nil
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.StoreTimeout <= 0 {
		o.StoreTimeout = 10 * time.Second
	}
	return nil
}
