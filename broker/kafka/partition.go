package kafka

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// partition is the worker of one owned topic partition. One goroutine (work)
// takes its records in offset order; a record stays at the head of the
// queue until it is done, so retries hold the partition and nothing after
// the head is ever marked done before it.
type partition struct {
	c         *Consumer
	topic     string
	partition int32

	ctx    context.Context // handler context: cancelled on loss or drain timeout
	cancel context.CancelFunc

	wake   chan struct{} // new records queued (buffered, 1)
	quit   chan struct{} // closed by stop: finish the current record, then exit
	once   sync.Once
	exited chan struct{} // closed when work returns

	mu        sync.Mutex
	queue     []*kgo.Record
	done      kgo.EpochOffset // next offset after the last done record
	hasDone   bool
	commitOff int64 // last committed offset; -1 before the first commit
	paused    bool

	// Owned by the work goroutine: how often the head record was tried,
	// and how many of those tries the handler failed.
	attempts int // tries of the head record in this process

	proc *broker.Processor[*kgo.Record] // the engine's processor over this partition's transport
	// Owned by the work goroutine, when the consumer claims in batches:
	// the tickets of the current batch not run yet, from the head on (see
	// batch.go).
	ahead []ahead
	// The memory of ahead and of a batch's messages, kept from one batch
	// to the next.
	aheadBuf []ahead
	msgsBuf  []idem.Message
}

func newPartition(c *Consumer, topic string, n int32, base context.Context) *partition {
	ctx, cancel := context.WithCancel(base)
	p := &partition{
		c: c, topic: topic, partition: n, ctx: ctx, cancel: cancel,
		wake: make(chan struct{}, 1), quit: make(chan struct{}), exited: make(chan struct{}),
		commitOff: -1,
	}
	p.proc = c.eng.Processor(transport{c: c, p: p})
	return p
}

// push appends records and reports whether the queue is full (MaxBuffered)
// with fetching from the partition not paused yet: the consumer then
// pauses it with pauseIfFull.
func (p *partition) push(recs []*kgo.Record) (full bool) {
	p.mu.Lock()
	p.queue = append(p.queue, recs...)
	full = !p.paused && len(p.queue) >= p.c.opts.MaxBuffered
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return full
}

// pauseIfFull pauses fetching from the partition if its queue is full.
// The consumer calls it once the client holds none of the partition's
// records (a pause drops them: fetched and decoded again on resume). Under
// the same lock as finish's resume, so a pause never outlives the queue
// that caused it; a stopped partition (revoked, lost) is never paused.
func (p *partition) pauseIfFull() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused || len(p.queue) < p.c.opts.MaxBuffered || p.stopping() {
		return
	}
	p.paused = true
	p.c.cl.PauseFetchPartitions(map[string][]int32{p.topic: {p.partition}})
}

// queued returns up to n records from the head of the queue on.
func (p *partition) queued(n int) []*kgo.Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*kgo.Record(nil), p.queue[:min(n, len(p.queue))]...)
}

func (p *partition) head() *kgo.Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 {
		return nil
	}
	return p.queue[0]
}

// finish marks the head record done and resumes fetching once the queue has
// drained to half of MaxBuffered.
func (p *partition) finish(rec *kgo.Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queue[0] = nil
	p.queue = p.queue[1:]
	p.done = kgo.EpochOffset{Epoch: rec.LeaderEpoch, Offset: rec.Offset + 1}
	p.hasDone = true
	p.attempts = 0
	if p.paused && len(p.queue) <= p.c.opts.MaxBuffered/2 {
		p.paused = false
		p.c.cl.ResumeFetchPartitions(map[string][]int32{p.topic: {p.partition}})
	}
}

// uncommitted returns the done position if it moved past the last commit.
func (p *partition) uncommitted() (kgo.EpochOffset, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done, p.hasDone && p.done.Offset > p.commitOff
}

func (p *partition) committed(eo kgo.EpochOffset) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.commitOff = max(p.commitOff, eo.Offset)
}

func (p *partition) stop() { p.once.Do(func() { close(p.quit) }) }

func (p *partition) stopping() bool {
	select {
	case <-p.quit:
		return true
	default:
		return false
	}
}

// work processes the queue in order until stopped, then releases the
// claims of records it did not run.
func (p *partition) work() {
	defer close(p.exited)
	defer p.releaseAhead()
	for {
		rec := p.head()
		if rec == nil {
			select {
			case <-p.wake:
				continue
			case <-p.quit:
				return
			}
		}
		if p.stopping() || p.ctx.Err() != nil {
			return
		}
		select {
		case p.c.sem <- struct{}{}:
		case <-p.quit:
			return
		}
		p.attempts++
		r := p.proc.ProcessUntil(p.ctx, p.quit, rec)
		<-p.c.sem
		if r.Action == idem.ActionAck || (r.Action == idem.ActionDeadLetter && r.BrokerErr == nil) {
			p.finish(rec)
			continue
		}
		p.releaseAhead()
		// Hold the partition: the same record is tried again after r.Delay
		// (the holder's lease for a key in progress elsewhere, else the
		// attempt's back-off), and nothing after it is marked done
		// meanwhile.
		if !p.wait(r.Delay) {
			return
		}
	}
}

// wait pauses before retrying the head record; false when stopped meanwhile.
func (p *partition) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.quit:
		return false
	case <-p.ctx.Done():
		return false
	}
}
