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

	"github.com/idemgo/idem"
)

// side is one group of competing consumers (idem's or the naive ones) and
// what happened to its deliveries.
type side struct {
	group  string
	handle func(ctx context.Context, s *side, d delivery) bool // false: the consumer crashed

	deliveries, duplicates, inProgress           atomic.Int64
	crashes, acksLost, handlerFailures, restarts atomic.Int64

	mu       sync.Mutex
	failure  error             // the last store or broker failure, for a stalled run's message
	attempts map[uint64]uint64 // deliveries seen per sequence number
	settled  map[uint64]bool   // sequence numbers acked or dead-lettered
	dead     map[uint64]string // sequence numbers dead-lettered, with the reason
}

func newSide(group string) *side {
	return &side{group: group, attempts: map[uint64]uint64{}, settled: map[uint64]bool{}, dead: map[uint64]string{}}
}

// attempt counts a delivery of seq and returns its number (1 for the first).
// The chaos keys on it rather than on a broker's own counter, which not
// every broker has.
func (s *side) attempt(seq uint64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts[seq]++
	return s.attempts[seq]
}

func (s *side) settle(seq uint64, deadReason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settled[seq] = true
	if deadReason != "" {
		s.dead[seq] = deadReason
	}
}

// fail notes a store or broker failure a delivery met.
func (s *side) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failure = err
}

// lastFailure describes the last failure noted, for a run's error.
func (s *side) lastFailure() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failure == nil {
		return ""
	}
	return "; the last failure: " + s.failure.Error()
}

func (s *side) settledCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.settled)
}

// wrapLedger, when set (by tests), wraps the run's ledger: a broken ledger
// must break the invariant the report checks.
var wrapLedger func(ledger) ledger

// runner is one demo run.
type runner struct {
	cfg    Config
	b      transport
	guard  *idem.Guard
	ledger ledger
	naive  *memLedger
	idem   *side
	naiveS *side
	// retriesDropped: the broker's duplicate detection drops the
	// producer's retries before any consumer sees them (dedupTransport).
	retriesDropped bool

	published atomic.Int64 // messages to settle; -1 until the producer has published everything
}

// Run runs the demo. The error reports a run that could not happen (the
// broker or store failed, the run stalled, ErrTimeout); a run that happened
// returns its Report, whose InvariantOK says whether idem kept its promise.
// On a store the user named, the run removes what it wrote there (its
// records and ledger tables) whether it succeeded or not; the Report says
// what it removed and what it could not.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()%1_000_000 + 1
	}
	start := time.Now()
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, cfg.Deadline)
	defer cancel()
	defer func() { err = timedOut(parent, ctx, cfg.Deadline, err) }()
	runID := fmt.Sprintf("%08x", rand.Uint32())
	scope := "demo-billing-" + runID

	st, err := openStore(ctx, cfg.Store, runID)
	if err != nil {
		return nil, err
	}
	defer st.close()
	var cl cleanup
	defer func() { err = cl.finish(rep, err) }()
	r := &runner{cfg: cfg, naive: newMemLedger(), idem: newSide("idem"), naiveS: newSide("naive")}
	r.published.Store(-1)
	if r.ledger, err = st.ledger(ctx, cfg.Mode, runID); err != nil {
		return nil, err
	}
	if wrapLedger != nil {
		r.ledger = wrapLedger(r.ledger)
	}
	cl.add(func(ctx context.Context) error {
		if err := r.ledger.close(ctx); err != nil {
			return fmt.Errorf("drop the ledger tables idem_demo_*_%s: %w", runID, err)
		}
		return nil
	})
	if st.named {
		cl.add(func(ctx context.Context) error {
			n, err := st.removeRecords(ctx, scope)
			cl.removed += n
			if err != nil {
				return fmt.Errorf("remove the records of scope %s from %s (they expire within the hour; "+
					"idem sweep --store '%s' deletes them then): %w", scope, st.h.Redacted, st.h.Redacted, err)
			}
			return nil
		})
	}
	b, err := startTransport(ctx, cfg, runID)
	if err != nil {
		return nil, err
	}
	defer b.close()
	r.b = b
	prodErr := make(chan error, 1)
	produce, producer := b.publish, ProducerDirect
	if cfg.Producer == ProducerOutbox {
		ob, err := startOutbox(ctx, b, prodErr)
		if err != nil {
			return nil, err
		}
		defer ob.close()
		produce, producer = ob.publish, ob.label
	}
	r.guard, err = idem.New(st.h.Store, idem.Options{
		Scope: scope,
		Key:   idem.HeaderKey(orderHeader),
		// A short lease: a consumer that dies holding a claim blocks its
		// order for seconds, not the default 30.
		Lease:     3 * time.Second,
		Retention: time.Hour,
		Observer:  cfg.Observer,
	})
	if err != nil {
		return nil, err
	}
	r.idem.handle = r.handleIdem
	r.naiveS.handle = r.handleNaive

	msgs := plan(cfg.Seed, cfg.Orders, cfg.DupRate, cfg.ConflictRate, accountsFor(cfg.Orders))
	toSettle := len(msgs)
	if dt, ok := b.(dedupTransport); ok && dt.dropsRetries() {
		r.retriesDropped = true
		for _, m := range msgs {
			if m.Retry {
				toSettle--
			}
		}
	}

	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, s := range []*side{r.idem, r.naiveS} {
		for range cfg.Consumers {
			wg.Add(1)
			go func() { defer wg.Done(); r.worker(wctx, s) }()
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i, m := range msgs {
			if err := produce(wctx, m, uint64(i+1)); err != nil {
				prodErr <- err
				return
			}
		}
		r.published.Store(int64(toSettle))
	}()
	waitErr := r.wait(ctx, prodErr, start)
	stopWorkers()
	if err := joinWorkers(&wg, b); err != nil && waitErr == nil {
		waitErr = err
	}
	if cfg.Progress != nil {
		fmt.Fprint(cfg.Progress, "\r\033[K")
	}
	if waitErr != nil {
		return nil, waitErr
	}

	rep = &Report{
		Store: st.label, Broker: b.name(), Producer: producer, Mode: r.ledger.mode(), Consumers: cfg.Consumers, Seed: cfg.Seed, RunID: runID,
		Scope: scope, StoreNamed: st.named, SchemaCreated: st.createdSchema, Where: st.h.Where,
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
			switch {
			case cfg.Producer == ProducerOutbox:
				rep.OutboxKeptOnce++
			case r.retriesDropped:
				rep.BrokerDropped++
			}
		case m.Conflict:
			rep.ConflictingSent++
		}
	}
	vctx, vcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer vcancel()
	if err := r.verify(vctx, rep, msgs); err != nil {
		return nil, err
	}
	rep.ElapsedMS = time.Since(start).Milliseconds()
	return rep, nil
}

// joinWorkers waits for the workers to stop. A broker client that hangs on
// the way out (a channel close the server never answers) must not hang the
// demo: after a grace period the broker connection is closed under them.
func joinWorkers(wg *sync.WaitGroup, b transport) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	grace := time.NewTimer(15 * time.Second)
	defer grace.Stop()
	select {
	case <-done:
		return nil
	case <-grace.C:
	}
	b.close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	return fmt.Errorf("%w: the consumers did not stop within 15s of the end; the broker connection was closed under them", ErrStalled)
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
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return timeoutErr(r.cfg.Deadline, fmt.Errorf("not every message was settled yet (%s)", r.status()))
			}
			return fmt.Errorf("interrupted (%s)", r.status())
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
			return fmt.Errorf("%w: nothing settled for %v (%s)%s", ErrStalled, r.cfg.Stall, r.status(), r.idem.lastFailure())
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

// worker is one consumer process: it handles messages until it crashes,
// then restarts with a fresh session, until ctx ends.
func (r *runner) worker(ctx context.Context, s *side) {
	for ctx.Err() == nil {
		if at, ok := r.b.(adapterTransport); ok && s == r.idem {
			at.consumeIdem(ctx, r)
		} else if sess, err := r.b.open(ctx, s.group); err == nil {
			r.consume(ctx, s, sess)
			sess.close()
		}
		if ctx.Err() != nil {
			return
		}
		s.restarts.Add(1)
		sleep(ctx, 50*time.Millisecond)
	}
}

// consume handles deliveries until the consumer crashes or ctx ends. A
// crashed consumer acks nothing more: what it held comes back, as a dead
// process's would.
func (r *runner) consume(ctx context.Context, s *side, sess session) {
	for ctx.Err() == nil {
		for d := range sess.fetch(ctx) {
			if ctx.Err() != nil || !s.handle(ctx, s, d) {
				return
			}
		}
	}
}

// handleIdem is idem's consumer: the charge goes through the ledger's idem
// mode, and idem.Decide says what to tell the broker.
func (r *runner) handleIdem(ctx context.Context, s *side, d delivery) bool {
	f, o, ok := r.delivery(s, d)
	if !ok {
		return true
	}
	msg := idem.Message{Headers: map[string]string{orderHeader: d.key()}, Payload: d.data(), ContentType: "application/json"}
	res, err := r.ledger.process(ctx, r.guard, msg, o, f == faultHandler)
	switch idem.Decide(res, err) {
	case idem.ActionAck:
		if res.Outcome == idem.OutcomeDuplicate {
			s.duplicates.Add(1)
		}
		return r.ack(ctx, s, d, f)
	case idem.ActionDeadLetter:
		reason := idem.DeadLetterReason(err)
		if derr := d.deadLetter(ctx, reason, err); derr != nil {
			s.fail(fmt.Errorf("dead-letter to the broker: %w", derr))
			d.retry(100 * time.Millisecond)
			return true
		}
		s.settle(d.seq(), reason)
	default:
		switch {
		case errors.Is(err, errDownstream):
			s.handlerFailures.Add(1)
			d.retry(20 * time.Millisecond)
		case errors.Is(err, idem.ErrInProgress):
			// Another consumer holds this order (a producer retry arrived
			// while the original was being charged): look again shortly.
			s.inProgress.Add(1)
			d.retry(200 * time.Millisecond)
		default:
			s.fail(fmt.Errorf("the store: %w", err))
			d.retry(100 * time.Millisecond)
		}
	}
	return true
}

// handleNaive is the consumer without dedup: it charges every delivery.
func (r *runner) handleNaive(ctx context.Context, s *side, d delivery) bool {
	f, o, ok := r.delivery(s, d)
	if !ok {
		return true
	}
	if f == faultHandler {
		s.handlerFailures.Add(1)
		d.retry(20 * time.Millisecond)
		return true
	}
	r.naive.apply(o)
	return r.ack(ctx, s, d, f)
}

// delivery decodes a delivery and draws its fault.
func (r *runner) delivery(s *side, d delivery) (f fault, o Order, ok bool) {
	s.deliveries.Add(1)
	if err := json.Unmarshal(d.data(), &o); err != nil || d.seq() == 0 {
		// The demo's producer never sends this; settle it so the run ends.
		_ = d.deadLetter(context.Background(), "malformed", fmt.Errorf("not a demo order"))
		s.settle(d.seq(), "malformed")
		return faultNone, o, false
	}
	return chaos(r.cfg.Seed, d.seq(), s.attempt(d.seq()), r.cfg.CrashRate), o, true
}

// ack acknowledges a processed delivery, unless the chaos crashes the
// consumer first or loses the ack.
func (r *runner) ack(ctx context.Context, s *side, d delivery, f fault) bool {
	switch {
	case f == faultCrash:
		s.crashes.Add(1)
		return false
	case f == faultAckLost && r.b.lostAckCrashes():
		s.acksLost.Add(1)
		return false
	case f == faultAckLost:
		s.acksLost.Add(1)
		return true
	}
	if err := d.ack(ctx); err != nil {
		s.fail(fmt.Errorf("ack to the broker: %w", err))
	} else {
		s.settle(d.seq(), "")
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
