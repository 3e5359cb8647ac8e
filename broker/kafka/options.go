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

// Options configure a Consumer. The zero value works except DeadLetterTopic,
// which is required: conflicts and permanent failures go there, because idem
// never drops a record silently.
type Options struct {
	// Concurrency is how many records are handled at once (broker.Options):
	// records of one partition are handled one at a time, in offset order,
	// so it is also how many partitions are processed at once. Default 8.
	Concurrency int
	// Backoff is the pause before a record is tried again after a transient
	// handler error or a failed dead-letter produce, and the pace of a held
	// record's claims (broker.Options), its partition held meanwhile.
	// Default idem.ExponentialBackoff(100ms, 10s).
	Backoff func(attempt int) time.Duration
	// MaxHold bounds how long a record whose key is in progress elsewhere is
	// held, claimed again at most a second apart, before it waits out the
	// rest of the holder's lease, its partition held either way
	// (broker.Options).
	MaxHold time.Duration
	// MaxDeliveries is the handler failures before a max_deliver dead letter,
	// counted by the record's attempts in two-phase mode and by this
	// process's tries in the transactional inbox: Kafka counts no deliveries
	// (broker.Options). Zero retries forever.
	MaxDeliveries int
	// ShutdownTimeout bounds an in-flight handler once its partition is
	// revoked or Run's context ends (broker.Options); keep it under the
	// group's rebalance timeout (60s by default). Default 30s.
	ShutdownTimeout time.Duration
	// Hooks are the user's places in each record's flow (broker.Options).
	// The errors the consumer handles by itself (failed commits as
	// *CommitError, dead-letter produces, batch claims and releases, fetch
	// errors) and store outages go to the guard's observer.
	Hooks broker.Hooks[*kgo.Record]

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

	// DeadLetterTimeout bounds the wait for each dead letter's produce:
	// past it the dead letter counts as failed (the record stays held and
	// is tried again after its back-off), so an unreachable broker cannot
	// hang the partition or the consumer's shutdown. franz-go cannot take
	// back a record in flight, so one whose wait ran out may still reach
	// the dead-letter topic later, and the retry adds a second copy (dead
	// letters are at least once, as deliveries are); set
	// kgo.RecordDeliveryTimeout on the Producer to have the client give it
	// up too. Default 30s.
	DeadLetterTimeout time.Duration

	// MaxPollRecords bounds the records taken from the client per poll.
	// Default 500.
	MaxPollRecords int

	// MaxBuffered is how many fetched records a partition may hold waiting
	// for processing before fetching from it pauses. What the client has
	// already fetched of a full partition is taken before the pause (a
	// pause drops it, to be fetched and decoded again on resume), so a
	// partition may hold more by up to one fetch of it
	// (kgo.FetchMaxPartitionBytes), memory the client held anyway.
	// Default 1000.
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

// engine fills the defaults of o's engine options and returns them as the
// engine's (broker.Options.Fill: its checks, its errors).
func (o *Options) engine() (broker.Options[*kgo.Record], error) {
	e := broker.Options[*kgo.Record]{
		Concurrency:     o.Concurrency,
		Backoff:         o.Backoff,
		MaxHold:         o.MaxHold,
		MaxDeliveries:   o.MaxDeliveries,
		ShutdownTimeout: o.ShutdownTimeout,
		Hooks:           o.Hooks,
	}
	err := e.Fill()
	o.Concurrency, o.Backoff, o.MaxHold, o.ShutdownTimeout = e.Concurrency, e.Backoff, e.MaxHold, e.ShutdownTimeout
	return e, err
}

// fill checks o and fills its defaults, and returns the engine's options.
func (o *Options) fill() (eo broker.Options[*kgo.Record], err error) {
	if o.DeadLetterTopic == "" {
		return eo, fmt.Errorf("%w: DeadLetterTopic is required (conflicts and permanent failures are dead-lettered, never dropped)", idem.ErrInvalidOptions)
	}
	if o.CommitInterval < 0 || o.DeadLetterTimeout < 0 || o.MaxPollRecords < 0 || o.MaxBuffered < 0 || o.MaxClaimBatch < 0 {
		return eo, fmt.Errorf("%w: negative kafka option", idem.ErrInvalidOptions)
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Backoff == nil {
		o.Backoff = idem.ExponentialBackoff(DefaultMinBackoff, DefaultMaxBackoff)
	}
	if eo, err = o.engine(); err != nil {
		return eo, err
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
	return eo, nil
}
