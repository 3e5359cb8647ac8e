package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
)

// side is one group of competing consumers (idem's or the naive ones) and
// what happened to its deliveries.
type side struct {
	durable string
	handle  func(ctx context.Context, s *side, m jetstream.Msg) bool // false: the consumer crashed

	deliveries, duplicates, inProgress           atomic.Int64
	crashes, acksLost, handlerFailures, restarts atomic.Int64

	mu      sync.Mutex
	settled map[uint64]bool   // stream sequences acked (confirmed) or dead-lettered
	dead    map[uint64]string // stream sequences dead-lettered, with the reason
}

func newSide(durable string) *side {
	return &side{durable: durable, settled: map[uint64]bool{}, dead: map[uint64]string{}}
}

func (s *side) settle(seq uint64, deadReason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settled[seq] = true
	if deadReason != "" {
		s.dead[seq] = deadReason
	}
}

func (s *side) settledCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.settled)
}

// runner is one demo run.
type runner struct {
	cfg    Config
	b      *broker
	guard  *idem.Guard
	ledger ledger
	naive  *memLedger
	idem   *side
	naiveS *side

	published atomic.Int64 // -1 until the producer has published everything
}

// Run runs the demo. The error reports a run that could not happen (the
// broker or store failed, the run stalled); a run that happened returns its
// Report, whose InvariantOK says whether idem kept its promise.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()%1_000_000 + 1
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, cfg.Deadline)
	defer cancel()
	runID := fmt.Sprintf("%08x", rand.Uint32())

	st, err := openStore(ctx, cfg.Store, runID)
	if err != nil {
		return nil, err
	}
	defer st.close()
	r := &runner{cfg: cfg, naive: newMemLedger(), idem: newSide("idem"), naiveS: newSide("naive")}
	r.published.Store(-1)
	if r.ledger, err = st.ledger(ctx, cfg.Mode, runID); err != nil {
		return nil, err
	}
	defer r.ledger.close()
	b, err := startBroker(ctx, cfg.Broker, runID)
	if err != nil {
		return nil, err
	}
	defer b.close()
	r.b = b
	r.guard, err = idem.New(st.h.Store, idem.Options{
		Scope: "demo-billing-" + runID,
		Key:   idem.HeaderKey(orderHeader),
		// A short lease: a consumer that dies holding a claim blocks its
		// order for seconds, not the default 30.
		Lease:     3 * time.Second,
		Retention: time.Hour,
	})
	if err != nil {
		return nil, err
	}
	r.idem.handle = r.handleIdem
	r.naiveS.handle = r.handleNaive

	msgs := plan(cfg.Seed, cfg.Orders, cfg.DupRate, cfg.ConflictRate, accountsFor(cfg.Orders))
	seqs := make([]uint64, len(msgs))

	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, s := range []*side{r.idem, r.naiveS} {
		if _, err := b.consumer(ctx, s.durable, cfg.AckWait); err != nil {
			stopWorkers()
			return nil, err
		}
		for range cfg.Consumers {
			wg.Add(1)
			go func() { defer wg.Done(); r.worker(wctx, s) }()
		}
	}
	prodErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i, m := range msgs {
			seq, err := b.publish(wctx, m)
			if err != nil {
				prodErr <- err
				return
			}
			seqs[i] = seq
		}
		r.published.Store(int64(len(msgs)))
	}()
	waitErr := r.wait(ctx, prodErr, start)
	stopWorkers()
	wg.Wait()
	if cfg.Progress != nil {
		fmt.Fprint(cfg.Progress, "\r\033[K")
	}
	if waitErr != nil {
		return nil, waitErr
	}

	rep := &Report{
		Store: st.label, Broker: b.name, Mode: r.ledger.mode(), Consumers: cfg.Consumers, Seed: cfg.Seed, RunID: runID,
		Published: len(msgs), Unique: cfg.Orders,
		Deliveries: r.idem.deliveries.Load(), DuplicatesSuppressed: r.idem.duplicates.Load(),
		InProgressRetried: r.idem.inProgress.Load(), NaiveDeliveries: r.naiveS.deliveries.Load(),
		Crashes: r.idem.crashes.Load(), AcksLost: r.idem.acksLost.Load(), HandlerFailures: r.idem.handlerFailures.Load(),
		Restarts: r.idem.restarts.Load() + r.naiveS.restarts.Load(),
	}
	for _, m := range msgs {
		switch {
		case m.Retry:
			rep.Retries++
		case m.Conflict:
			rep.ConflictingSent++
		}
	}
	vctx, vcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer vcancel()
	if err := r.verify(vctx, rep, msgs, seqs); err != nil {
		return nil, err
	}
	rep.ElapsedMS = time.Since(start).Milliseconds()
	return rep, nil
}

func accountsFor(orders int) int { return min(50, max(3, orders/40)) }

// wait returns when both sides have settled every published message, or
// fails when nothing settles for cfg.Stall, the producer fails, or ctx ends.
func (r *runner) wait(ctx context.Context, prodErr <-chan error, start time.Time) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	last, lastAt := -1, time.Now()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: deadline of %v reached (%s)", ErrStalled, r.cfg.Deadline, r.status())
		case err := <-prodErr:
			return fmt.Errorf("producer: %w", err)
		case <-tick.C:
		}
		total := r.published.Load()
		si, sn := r.idem.settledCount(), r.naiveS.settledCount()
		if r.cfg.Progress != nil {
			fmt.Fprintf(r.cfg.Progress, "\r\033[K%5.1fs  %s", time.Since(start).Seconds(), r.status())
		}
		if total >= 0 && int64(si) == total && int64(sn) == total {
			return nil
		}
		if si+sn != last {
			last, lastAt = si+sn, time.Now()
		} else if time.Since(lastAt) > r.cfg.Stall {
			return fmt.Errorf("%w: nothing settled for %v (%s)", ErrStalled, r.cfg.Stall, r.status())
		}
	}
}

func (r *runner) status() string {
	total := r.published.Load()
	t := "publishing"
	if total >= 0 {
		t = fmt.Sprint(total)
	}
	return fmt.Sprintf("idem: %d/%s settled, %d deliveries, %d duplicates suppressed, %d crashes | naive: %d/%s settled",
		r.idem.settledCount(), t, r.idem.deliveries.Load(), r.idem.duplicates.Load(), r.idem.crashes.Load(),
		r.naiveS.settledCount(), t)
}

// worker is one consumer process: it pulls and handles messages until it
// crashes, then restarts with a fresh consumer handle, until ctx ends.
func (r *runner) worker(ctx context.Context, s *side) {
	for ctx.Err() == nil {
		cons, err := r.b.js.Consumer(ctx, r.b.stream, s.durable)
		if err == nil {
			r.pull(ctx, s, cons)
		}
		if ctx.Err() != nil {
			return
		}
		s.restarts.Add(1)
		sleep(ctx, 50*time.Millisecond)
	}
}

// pull handles batches until the consumer crashes or ctx ends. A crashed
// consumer acks nothing more of its batch: those messages come back after
// the ack wait, like those of a real process that died.
func (r *runner) pull(ctx context.Context, s *side, cons jetstream.Consumer) {
	for ctx.Err() == nil {
		batch, err := cons.Fetch(16, jetstream.FetchMaxWait(250*time.Millisecond))
		if err != nil {
			sleep(ctx, 50*time.Millisecond)
			continue
		}
		alive := true
		for m := range batch.Messages() {
			if alive && ctx.Err() == nil {
				alive = s.handle(ctx, s, m)
			}
		}
		if !alive {
			return
		}
	}
}

// handleIdem is idem's consumer: the charge goes through the ledger's idem
// mode, and idem.Decide says what to tell the broker.
func (r *runner) handleIdem(ctx context.Context, s *side, m jetstream.Msg) bool {
	seq, f, o, ok := r.delivery(s, m)
	if !ok {
		return true
	}
	msg := idem.Message{Headers: map[string]string{orderHeader: m.Headers().Get(orderHeader)}, Payload: m.Data(),
		ContentType: "application/json"}
	res, err := r.ledger.process(ctx, r.guard, msg, o, f == faultHandler)
	switch idem.Decide(res, err) {
	case idem.ActionAck:
		if res.Outcome == idem.OutcomeDuplicate {
			s.duplicates.Add(1)
		}
		return r.ack(ctx, s, m, seq, f)
	case idem.ActionDeadLetter:
		reason := idem.DeadLetterReason(err)
		if derr := r.b.deadLetter(ctx, m, reason, err); derr != nil {
			_ = m.NakWithDelay(100 * time.Millisecond)
			return true
		}
		if err := m.Term(); err == nil {
			s.settle(seq, reason)
		}
	default:
		switch {
		case errors.Is(err, errDownstream):
			s.handlerFailures.Add(1)
			_ = m.NakWithDelay(20 * time.Millisecond)
		case errors.Is(err, idem.ErrInProgress):
			// Another consumer holds this order (a producer retry arrived
			// while the original was being charged): look again shortly.
			s.inProgress.Add(1)
			_ = m.NakWithDelay(200 * time.Millisecond)
		default:
			_ = m.NakWithDelay(100 * time.Millisecond)
		}
	}
	return true
}

// handleNaive is the consumer without dedup: it charges every delivery.
func (r *runner) handleNaive(ctx context.Context, s *side, m jetstream.Msg) bool {
	seq, f, o, ok := r.delivery(s, m)
	if !ok {
		return true
	}
	if f == faultHandler {
		s.handlerFailures.Add(1)
		_ = m.NakWithDelay(20 * time.Millisecond)
		return true
	}
	r.naive.apply(o)
	return r.ack(ctx, s, m, seq, f)
}

// delivery decodes a delivery and draws its fault.
func (r *runner) delivery(s *side, m jetstream.Msg) (seq uint64, f fault, o Order, ok bool) {
	meta, err := m.Metadata()
	if err != nil {
		_ = m.Nak()
		return 0, faultNone, o, false
	}
	s.deliveries.Add(1)
	seq = meta.Sequence.Stream
	if err := json.Unmarshal(m.Data(), &o); err != nil {
		// The demo's producer never sends this; settle it so the run ends.
		_ = m.Term()
		s.settle(seq, "malformed")
		return 0, faultNone, o, false
	}
	return seq, chaos(r.cfg.Seed, seq, meta.NumDelivered, r.cfg.CrashRate), o, true
}

// ack acknowledges a processed delivery, unless the chaos crashes the
// consumer first or loses the ack. The ack is confirmed by the server, so a
// settled message is one the broker will not redeliver.
func (r *runner) ack(ctx context.Context, s *side, m jetstream.Msg, seq uint64, f fault) bool {
	switch f {
	case faultCrash:
		s.crashes.Add(1)
		return false
	case faultAckLost:
		s.acksLost.Add(1)
		return true
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := m.DoubleAck(actx); err == nil {
		s.settle(seq, "")
	}
	return true
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
