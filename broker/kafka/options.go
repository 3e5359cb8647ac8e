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
	DefaultMinBackoff     = 100 * time.Millisecond
	DefaultMaxBackoff     = 10 * time.Second
	DefaultCommitInterval = time.Second
	DefaultDeadLetterWait = 30 * time.Second
	DefaultMaxPollRecords = 500
	DefaultMaxBuffered    = 1000
)

// ConsumerOptions are the engine's options of a Consumer, for literals:
// kafka.Options{DeadLetterTopic: "orders.dlq", Options: kafka.ConsumerOptions{Concurrency: 4}}.
type ConsumerOptions = broker.Options[*kgo.Record]

// Options configure a Consumer. The zero value works except DeadLetterTopic,
// which is required: conflicts and permanent failures go there, because idem
// never drops a record silently.
type Options struct {
	// Options are the engine's, the same in every adapter (see
	// broker.Options):
	//   - Concurrency: records handled at once. Records of one partition
	//     are always handled one at a time, in offset order, so this is
	//     also how many partitions are processed at once. Default 8.
	//   - Backoff: the pause before a record is tried again after a
	//     transient handler error or a failed dead-letter produce, and the
	//     pace of the claims of a record held in progress elsewhere or
	//     during a store outage. Default idem.ExponentialBackoff(100ms, 10s).
	//     The partition is held meanwhile: the record is never skipped and
	//     no later offset of its partition is committed.
	//   - MaxHold: how long a record whose key is in progress elsewhere is
	//     held, claimed again at most a second apart and at the latest when
	//     the holder's lease ends, before it waits out the rest of that
	//     lease (the partition held either way).
	//   - MaxDeliveries: the record is dead-lettered (reason
	//     broker.ReasonMaxDeliver) after its handler failed this many
	//     times, counted by the record's attempts in two-phase mode and by
	//     this process's tries in the transactional inbox: Kafka counts no
	//     deliveries, so this is the consumer's delivery limit. Zero retries
	//     forever. Keys in progress elsewhere and store outages are not
	//     failures: they resolve without the record's fault.
	//   - ShutdownTimeout: how long an in-flight handler may run after its
	//     partition was revoked or Run's context ended; then its context is
	//     cancelled (the claim is released and the record redelivered
	//     later). Keep it under the group's rebalance timeout (60s by
	//     default). Default 30s.
	//   - Hooks: BeforeSettle once the outcome is known and before the
	//     record counts as done (before its offset can be committed, before
	//     its dead letter is produced, before the partition is held for a
	//     retry); AfterSettle after that; OnDeadLetter once a dead letter is
	//     acknowledged (alert on conflicts there); OnError for the errors the
	//     consumer handles by itself: failed commits (*CommitError, retried
	//     at the next commit), failed dead-letter produces, failed batch
	//     claims and releases, store outages (*broker.OutageError) and fetch
	//     errors.
	broker.Options[*kgo.Record]

	// DeadLetterTopic receives records that retrying cannot fix: key
	// conflicts, permanent handler errors, missing or invalid keys, parked
	// stale records, and records whose handler failed MaxDeliveries times
	// (reason broker.ReasonMaxDeliver). The dead letter keeps the record's
	// key, value and headers as they were, after the engine's dead-letter
	// headers (broker.DeadLetterHeaders: reason, error, key, this record's
	// fingerprint and the stored record's) and Idem-Original-Topic,
	// -Partition, -Offset and -Timestamp (see the package doc); Replay
	// sends it back. Required.
	DeadLetterTopic string

	// Producer writes dead letters. Default: the consumer's own client.
	// Set it when the dead-letter topic lives in another cluster.
	Producer *kgo.Client

	// CommitInterval is how often done offsets are committed while running.
	// Offsets are also committed when partitions are revoked and on
	// shutdown. Default 1s.
	CommitInterval time.Duration

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
	// storekit.BatchStore: the record at the head and those queued behind it
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
}

func (o *Options) fill() error {
	if o.DeadLetterTopic == "" {
		return fmt.Errorf("%w: DeadLetterTopic is required (conflicts and permanent failures are dead-lettered, never dropped)", idem.ErrInvalidOptions)
	}
	if o.CommitInterval < 0 || o.DeadLetterTimeout < 0 || o.MaxPollRecords < 0 || o.MaxBuffered < 0 || o.MaxClaimBatch < 0 {
		return fmt.Errorf("%w: negative kafka option", idem.ErrInvalidOptions)
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Backoff == nil {
		o.Backoff = idem.ExponentialBackoff(DefaultMinBackoff, DefaultMaxBackoff)
	}
	if err := o.Options.Fill(); err != nil {
		return err
	}
	if o.CommitInterval == 0 {
		o.CommitInterval = DefaultCommitInterval
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
