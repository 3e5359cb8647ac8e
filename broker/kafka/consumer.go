package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/internal/claimcheck"
)

// Consumer consumes a group's partitions through an idem.Guard: the effect
// of each key happens once (effectively once; a failed attempt is released
// and tried again), records of one partition are processed strictly in
// order, and an offset is committed only when its record and every record
// before it in the partition are done (processed, skipped as a duplicate,
// or dead-lettered with the dead letter acknowledged).
type Consumer struct {
	cl   *kgo.Client
	g    *idem.Guard // the caller's guard, as given
	h    Handler
	opts Options
	eng  *broker.Engine[*kgo.Record] // h under g, checked once: each partition's processor
	// batch: partitions claim their queued records in batches and run
	// each under its ticket (see batch.go); else each record is claimed
	// in its turn.
	batch bool
	// lite: the guard reads of a message only what guardMessage keeps
	// (claimcheck.ReadsDefaults), and no handler of this package sees the
	// message, so records are read with guardMessage, not MessageOf.
	lite bool

	ran atomic.Bool

	mu    sync.Mutex        // guards parts and base
	parts map[tp]*partition // partitions that received records and are still owned
	base  context.Context   // parent of handler contexts; nil when not running
	sem   chan struct{}     // bounds partitions processed at once
}

type tp struct {
	topic     string
	partition int32
}

// NewConsumer returns a consumer reading with cl and running h for each
// record under g. The guard is the one place for the scope and the key:
// build it with NewGuard, whose scope defaults to the consumer group, and
// leave idem.Options.Key at its default (idem.MessageID, which reads the
// idempotency-key header through MessageOf) or set it there
// (idem.CloudEventsKey, idem.JSONFieldsKey, ...).
//
// cl must be built by the caller with kgo.ConsumerGroup, kgo.ConsumeTopics
// and ClientOptions (which disables autocommit, blocks rebalances during
// hand-over and installs the rebalance hooks); otherwise the error wraps
// ErrClientConfig. A missing DeadLetterTopic, a negative or contradictory
// option, a nil guard, a nil handler, and a HandleTx handler whose Tx the
// guard's store has no transactions for are refused here, with an error
// wrapping idem.ErrInvalidOptions (and idem.ErrNoTx for the last).
//
// The consumer never closes cl: after Run returns, close it yourself.
func NewConsumer(cl *kgo.Client, g *idem.Guard, h Handler, opts Options) (*Consumer, error) {
	if cl == nil {
		return nil, fmt.Errorf("%w: kafka: nil client", idem.ErrInvalidOptions)
	}
	if err := h.check(g); err != nil {
		return nil, err
	}
	hooks, err := checkClient(cl)
	if err != nil {
		return nil, err
	}
	if h.cp != nil {
		if err := hooks.checkResume(cl); err != nil {
			return nil, err
		}
	}
	eo, err := opts.fill()
	if err != nil {
		return nil, err
	}
	if opts.Producer == nil {
		opts.Producer = cl
	}
	eng, err := broker.NewEngine(g, h.engine(), eo)
	if err != nil {
		return nil, err
	}
	c := &Consumer{cl: cl, g: g, h: h, eng: eng, opts: opts,
		parts: make(map[tp]*partition), sem: make(chan struct{}, opts.Concurrency)}
	batch, err := claimsAhead(g, h, opts.MaxClaimBatch)
	if err != nil {
		return nil, err
	}
	c.batch = batch
	c.lite = claimcheck.ReadsDefaults != nil && claimcheck.ReadsDefaults(g)
	if err := register(cl, c); err != nil {
		return nil, err
	}
	hooks.set(c)
	return c, nil
}

// Consume builds a consumer with NewConsumer and runs it until ctx ends:
// NewConsumer's errors, then Run's.
func Consume(ctx context.Context, cl *kgo.Client, g *idem.Guard, h Handler, opts Options) error {
	c, err := NewConsumer(cl, g, h, opts)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// Scope returns the scope under which the consumer stores keys: the
// guard's.
func (c *Consumer) Scope() string { return c.g.Options().Scope }

// Run consumes until ctx ends, running the consumer's handler for each
// record. On shutdown it stops fetching, lets in-flight handlers finish (up
// to ShutdownTimeout, then cancels them, which releases their claims), gives
// back the claims of records it did not run, commits what is done, and
// returns nil; or the final commit's error. It returns early with an error
// wrapping kgo.ErrClientClosed if the client is closed under it. A
// Consumer runs once: a second Run returns ErrRunning.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.ran.CompareAndSwap(false, true) {
		return ErrRunning
	}
	return c.run(ctx)
}

func (c *Consumer) run(ctx context.Context) error {
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	c.mu.Lock()
	c.base = base
	c.mu.Unlock()

	// Every poll that returns blocks rebalances until AllowRebalance, so
	// the hand-over below and the commits never race a revoke.
	defer c.cl.AllowRebalance()
	lastCommit := time.Now()
	for {
		pctx, cancel := context.WithTimeout(ctx, c.opts.CommitInterval)
		fetches := c.cl.PollRecords(pctx, c.opts.MaxPollRecords)
		cancel()
		if fetches.IsClientClosed() {
			c.shutdown(false)
			return fmt.Errorf("kafka: consumer stopped: %w", kgo.ErrClientClosed)
		}
		if ctx.Err() != nil {
			break
		}
		full := c.take(fetches, nil)
		if len(full) > 0 && fetches.NumRecords() >= c.opts.MaxPollRecords {
			// The client may hold more of a full partition's records
			// (the poll took as many as it asks for): pausing the
			// partition now would drop them, to be fetched and decoded
			// again on resume, a whole fetch for every MaxBuffered/2
			// records processed. Everything the client holds is taken
			// first (a nil context does not wait).
			full = c.take(c.cl.PollRecords(nil, -1), full)
		}
		for _, p := range full {
			p.pauseIfFull()
		}
		if time.Since(lastCommit) >= c.opts.CommitInterval {
			c.commit(c.owned())
			lastCommit = time.Now()
		}
		c.cl.AllowRebalance()
	}
	return c.shutdown(true)
}

// shutdown stops every partition (draining in-flight handlers), commits what
// is done when commit is set, and forgets the partitions.
func (c *Consumer) shutdown(commit bool) error {
	c.mu.Lock()
	parts := make([]*partition, 0, len(c.parts))
	for k, p := range c.parts {
		parts = append(parts, p)
		delete(c.parts, k)
	}
	c.base = nil
	c.mu.Unlock()
	c.stopAll(parts, true)
	if !commit {
		return nil
	}
	return c.commit(parts)
}

// take dispatches what a poll returned and reports its fetch errors. It
// returns full with the partitions whose queue became full appended.
func (c *Consumer) take(fetches kgo.Fetches, full []*partition) []*partition {
	fetches.EachError(func(topic string, partition int32, err error) {
		// The client retries fetch errors by itself; they are
		// reported, not acted on. The poll's own timeout is no error.
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			c.reportError(fmt.Errorf("kafka: fetch %s/%d: %w", topic, partition, err))
		}
	})
	fetches.EachPartition(func(f kgo.FetchTopicPartition) {
		if len(f.Records) == 0 {
			return
		}
		if p := c.dispatch(f.Topic, f.Partition, f.Records); p != nil {
			full = append(full, p)
		}
	})
	return full
}

// dispatch appends polled records to their partition's queue, starting its
// worker on first use. It returns the partition when its queue is full and
// fetching from it is not paused yet, else nil.
func (c *Consumer) dispatch(topic string, partition int32, recs []*kgo.Record) *partition {
	c.mu.Lock()
	p := c.parts[tp{topic, partition}]
	if p == nil {
		p = newPartition(c, topic, partition, c.base)
		c.parts[tp{topic, partition}] = p
		go p.work()
	}
	c.mu.Unlock()
	if p.push(recs) {
		return p
	}
	return nil
}

// owned returns the partitions currently worked on.
func (c *Consumer) owned() []*partition {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*partition, 0, len(c.parts))
	for _, p := range c.parts {
		out = append(out, p)
	}
	return out
}

// revoke is the rebalance hook: it stops the workers of the given
// partitions, and on a revoke (graceful) lets their in-flight records finish
// and commits what is done; on a loss it cancels handlers at once and
// commits nothing (the generation is gone; the store's fencing keeps a
// late handler from completing over the new owner).
func (c *Consumer) revoke(tps map[string][]int32, graceful bool) {
	var parts []*partition
	c.mu.Lock()
	for topic, ps := range tps {
		for _, n := range ps {
			if p := c.parts[tp{topic, n}]; p != nil {
				parts = append(parts, p)
				delete(c.parts, tp{topic, n})
			}
		}
	}
	c.mu.Unlock()
	if len(parts) == 0 {
		return
	}
	c.stopAll(parts, graceful)
	if graceful {
		c.commit(parts)
	}
	// A paused partition stays paused in the client across rebalances;
	// resume it so that it is fetched if it comes back to this member.
	resume := make(map[string][]int32)
	for _, p := range parts {
		resume[p.topic] = append(resume[p.topic], p.partition)
	}
	c.cl.ResumeFetchPartitions(resume)
}

// stopAll stops the workers of parts and waits for them. Graceful stops let
// in-flight handlers run up to ShutdownTimeout before cancelling them.
func (c *Consumer) stopAll(parts []*partition, graceful bool) {
	for _, p := range parts {
		p.stop()
		if !graceful {
			p.cancel()
		}
	}
	if graceful {
		timer := time.NewTimer(c.opts.ShutdownTimeout)
		defer timer.Stop()
		for _, p := range parts {
			select {
			case <-p.exited:
			case <-timer.C:
				for _, q := range parts {
					q.cancel()
				}
			}
		}
	}
	for _, p := range parts {
		<-p.exited
		p.cancel()
	}
}

// commit commits the done offsets of parts that moved since their last
// commit, in one synchronous request.
func (c *Consumer) commit(parts []*partition) error {
	offsets := make(map[string]map[int32]kgo.EpochOffset)
	var moved []*partition
	for _, p := range parts {
		eo, ok := p.uncommitted()
		if !ok {
			continue
		}
		if offsets[p.topic] == nil {
			offsets[p.topic] = make(map[int32]kgo.EpochOffset)
		}
		offsets[p.topic][p.partition] = eo
		moved = append(moved, p)
	}
	if len(moved) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.g.Options().StoreTimeout)
	defer cancel()
	var cerr error
	c.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil && cerr == nil {
					cerr = err
				}
			}
		}
	})
	if cerr != nil {
		plain := make(map[string]map[int32]int64, len(offsets))
		for t, ps := range offsets {
			plain[t] = make(map[int32]int64, len(ps))
			for n, eo := range ps {
				plain[t][n] = eo.Offset
			}
		}
		err := &CommitError{Offsets: plain, Err: cerr}
		c.reportError(err)
		return err
	}
	for _, p := range moved {
		p.committed(offsets[p.topic][p.partition])
	}
	return nil
}

func (c *Consumer) reportError(err error) {
	if err != nil && !errors.Is(err, context.Canceled) {
		c.eng.ReportError(err)
	}
}
