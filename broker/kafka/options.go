package kafka

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
)

// DefaultKeyHeader is the record header that carries the idempotency key by
// default. Record sets it on the producer side.
const DefaultKeyHeader = "idempotency-key"

// Defaults for Options.
const (
	DefaultConcurrency    = 8
	DefaultRetryMin       = 100 * time.Millisecond
	DefaultRetryMax       = 10 * time.Second
	DefaultCommitInterval = time.Second
	DefaultDrainTimeout   = 15 * time.Second
	DefaultMaxPollRecords = 500
	DefaultMaxBuffered    = 1000
)

// Options configure a Consumer. The zero value works except DeadLetterTopic,
// which is required: conflicts and permanent failures go there, because idem
// never drops a record silently.
type Options struct {
	// Scope is the consumer identity under which keys are stored. Default:
	// the client's consumer group, so two groups reading one topic never
	// block each other. It replaces the guard's own scope: NewConsumer
	// derives the consumer's guard with idem.Guard.With(Scope, Key).
	Scope string

	// Key extracts the record's stable id. Default:
	// idem.HeaderKey("idempotency-key"). Use idem.CloudEventsKey for
	// CloudEvents (binary mode ce_id / ce_source headers or a structured
	// payload), idem.JSONFieldsKey for a business key, or idem.FirstOf to
	// combine. Never use the offset: a producer retry without idempotence
	// writes the same message at a new offset. It replaces the guard's own
	// key function (whose default, idem.MessageID, finds nothing in a Kafka
	// record); the guard's Fingerprint, Lease, Retention, Stale, MissingKey,
	// MaxResultSize and Observer settings apply as they are.
	Key idem.KeyFunc

	// DeadLetterTopic receives records that retrying cannot fix: key
	// conflicts, permanent handler errors, missing or invalid keys, parked
	// stale records, and records that failed MaxAttempts times. The dead
	// letter keeps the record's key, value and headers as they were, after
	// the headers of idem.DeadLetterHeaders (reason, error, key, and the
	// stored record beside the record's fingerprint) and
	// Idem-Original-Topic, -Partition, -Offset and -Timestamp (see the
	// package doc). Required.
	DeadLetterTopic string

	// Producer writes dead letters. Default: the consumer's own client.
	// Set it when the dead-letter topic lives in another cluster.
	Producer *kgo.Client

	// Concurrency is how many partitions are processed at the same time.
	// Records of one partition are always processed one at a time, in
	// offset order. Default 8.
	Concurrency int

	// RetryMin and RetryMax bound the back-off before a record is tried
	// again after a transient handler error, a store error or a failed
	// dead-letter produce. The back-off doubles from RetryMin up to
	// RetryMax, and each pause is drawn in [d/2, d]
	// (idem.ExponentialBackoff) so that consumers that failed together do
	// not retry together. A key in progress at another consumer does not
	// use it: its record waits for the holder's lease to end
	// (idem.RetryAfter). The partition is held meanwhile: the record is
	// never skipped and no later offset of its partition is committed.
	// Defaults 100ms and 10s.
	RetryMin, RetryMax time.Duration

	// MaxAttempts dead-letters a record (reason "retries_exhausted") after
	// its handler failed this many times in a row in this process. Zero
	// retries forever. Keys in progress elsewhere and store errors are
	// retried without limit: they resolve without the record's fault (a
	// live holder completes or gives the key back; an orphaned claim is
	// retaken once its lease ends).
	MaxAttempts int

	// CommitInterval is how often done offsets are committed while running.
	// Offsets are also committed when partitions are revoked and on
	// shutdown. Default 1s.
	CommitInterval time.Duration

	// DrainTimeout bounds how long an in-flight handler may run after its
	// partition was revoked or Run's context ended; then its context is
	// cancelled (the claim is released and the record redelivered later).
	// Keep it under the group's rebalance timeout (60s by default).
	// Default 15s.
	DrainTimeout time.Duration

	// MaxPollRecords bounds the records taken from the client per poll.
	// Default 500.
	MaxPollRecords int

	// MaxBuffered is how many fetched records a partition may hold waiting
	// for processing before fetching from it pauses. Default 1000.
	MaxBuffered int

	// MaxClaimBatch bounds how many queued records of a partition Run
	// claims in one round trip when the guard's store is an
	// idem.BatchStore: the record at the head and those queued behind it
	// are claimed together, then run one by one in offset order. Default
	// MaxPollRecords. Claiming ahead starts the leases of the records that
	// wait behind the head: for the records before them in the batch, and,
	// when more partitions have records than Concurrency, for other
	// partitions' records too. A ticket whose lease aged by a third before
	// its turn costs one renewal round trip (idem.Ticket.Do), so with slow
	// handlers keep that wait well under a third of the guard's Lease. 1
	// claims each record in its turn, as RunTx and stores without batch
	// claims always do.
	MaxClaimBatch int

	// OnDeadLetter, if set, is called after a dead letter is acknowledged,
	// with the original record, the reason (the Idem-Reason header) and
	// the error that caused it: the place to alert on conflicts. It must
	// be safe for concurrent use.
	OnDeadLetter func(rec *kgo.Record, reason string, err error)

	// OnError, if set, receives errors the consumer handles by itself:
	// failed commits (*CommitError, retried at the next commit), failed
	// dead-letter produces (*DeadLetterError, retried after a back-off) and
	// fetch errors (retried by the client). Handler and store outcomes go
	// to the guard's Observer. It must be safe for concurrent use.
	OnError func(error)
}

func (o *Options) fill(group string) error {
	if o.Scope == "" {
		o.Scope = group
	}
	// Guard.With validates the scope.
	if o.Key == nil {
		o.Key = idem.HeaderKey(DefaultKeyHeader)
	}
	if o.DeadLetterTopic == "" {
		return fmt.Errorf("%w: DeadLetterTopic is required (conflicts and permanent failures are dead-lettered, never dropped)", idem.ErrInvalidOptions)
	}
	if o.Concurrency < 0 || o.RetryMin < 0 || o.RetryMax < 0 || o.MaxAttempts < 0 ||
		o.CommitInterval < 0 || o.DrainTimeout < 0 || o.MaxPollRecords < 0 || o.MaxBuffered < 0 || o.MaxClaimBatch < 0 {
		return fmt.Errorf("%w: negative kafka option", idem.ErrInvalidOptions)
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.RetryMin == 0 {
		o.RetryMin = DefaultRetryMin
	}
	if o.RetryMax == 0 {
		o.RetryMax = DefaultRetryMax
	}
	if o.RetryMax < o.RetryMin {
		return fmt.Errorf("%w: RetryMax (%v) below RetryMin (%v)", idem.ErrInvalidOptions, o.RetryMax, o.RetryMin)
	}
	if o.CommitInterval == 0 {
		o.CommitInterval = DefaultCommitInterval
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	if o.MaxPollRecords == 0 {
		o.MaxPollRecords = DefaultMaxPollRecords
	}
	if o.MaxClaimBatch == 0 {
		o.MaxClaimBatch = o.MaxPollRecords
	}
	if o.MaxBuffered == 0 {
		o.MaxBuffered = DefaultMaxBuffered
	}
	return nil
}
