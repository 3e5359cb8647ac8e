package kafka

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// DefaultKeyHeader is the record header that carries the message's stable
// id: MessageOf reads it into idem.Message.ID, where the guard's default key
// (idem.MessageID) finds it, and Record sets it on the producer side.
const DefaultKeyHeader = "idempotency-key"

// Defaults for Options.
const (
	DefaultConcurrency    = 8
	DefaultRetryMin       = 100 * time.Millisecond
	DefaultRetryMax       = 10 * time.Second
	DefaultCommitInterval = time.Second
	DefaultDrainTimeout   = 15 * time.Second
	DefaultDeadLetterWait = 30 * time.Second
	DefaultMaxPollRecords = 500
	DefaultMaxBuffered    = 1000
)

// Options configure a Consumer. The zero value works except DeadLetterTopic,
// which is required: conflicts and permanent failures go there, because idem
// never drops a record silently.
type Options struct {
	// DeadLetterTopic receives records that retrying cannot fix: key
	// conflicts, permanent handler errors, missing or invalid keys, parked
	// stale records, and records whose handler failed MaxAttempts times
	// (reason broker.ReasonMaxDeliver). The dead letter keeps the record's
	// key, value and headers as they were, after the headers of
	// idem.DeadLetterHeaders (reason, error, key, and the stored record
	// beside the record's fingerprint) and Idem-Original-Topic, -Partition,
	// -Offset and -Timestamp (see the package doc); Replay sends it back.
	// Required.
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

	// MaxAttempts dead-letters a record (reason broker.ReasonMaxDeliver)
	// after its handler failed this many times in a row in this process:
	// Kafka counts no deliveries, so this is the consumer's delivery limit.
	// Zero retries forever. Keys in progress elsewhere and store errors are
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

	// DeadLetterTimeout bounds each produce of a dead letter: past it the
	// produce fails (the record stays held and is tried again after its
	// back-off), so an unreachable broker cannot hang the consumer's
	// shutdown. franz-go can cancel a record only while it is not in flight
	// to a broker under idempotent production; for a hard bound set
	// kgo.RecordDeliveryTimeout on the Producer too. Default 30s.
	DeadLetterTimeout time.Duration

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
	// partitions' records too. A claim whose lease aged by a third before
	// its turn costs one renewal round trip (as idem.Ticket.Do), so with
	// slow handlers keep that wait well under a third of the guard's Lease.
	// 1 claims each record in its turn, as HandleTx handlers and stores
	// without batch claims always do.
	MaxClaimBatch int

	// Hooks are the user's places in the flow of each record (see
	// broker.Hooks): BeforeSettle once the outcome is known and before the
	// record counts as done (before its offset can be committed, before its
	// dead letter is produced, before the partition is held for a retry);
	// AfterSettle after that; OnDeadLetter once a dead letter is
	// acknowledged (alert on conflicts there); OnError for the errors the
	// consumer handles by itself: failed commits (*CommitError, retried at
	// the next commit), failed dead-letter produces (*DeadLetterError,
	// retried after a back-off), failed batch claims and releases, and
	// fetch errors (retried by the client). Handler and store outcomes also
	// go to the guard's Observer. Hooks run on the partition's worker and
	// must be safe for concurrent use.
	Hooks broker.Hooks[*kgo.Record]
}

func (o *Options) fill() error {
	if o.DeadLetterTopic == "" {
		return fmt.Errorf("%w: DeadLetterTopic is required (conflicts and permanent failures are dead-lettered, never dropped)", idem.ErrInvalidOptions)
	}
	if o.Concurrency < 0 || o.RetryMin < 0 || o.RetryMax < 0 || o.MaxAttempts < 0 ||
		o.CommitInterval < 0 || o.DrainTimeout < 0 || o.DeadLetterTimeout < 0 || o.MaxPollRecords < 0 || o.MaxBuffered < 0 || o.MaxClaimBatch < 0 {
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
	if o.DeadLetterTimeout == 0 {
		o.DeadLetterTimeout = DefaultDeadLetterWait
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
