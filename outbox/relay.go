package outbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgo/idem"
)

// Defaults for RelayOptions.
const (
	DefaultBatchSize       = 500
	DefaultPollInterval    = time.Second
	DefaultLease           = 15 * time.Second
	DefaultRetention       = 24 * time.Hour
	DefaultCleanupInterval = time.Minute
	DefaultCleanupBatch    = 1000
)

// RelayOptions configure a Relay. The zero value works.
type RelayOptions struct {
	// Owner names this relay instance in the lease; default host name,
	// process id and a random suffix. Two relays must never share one.
	Owner string
	// BatchSize is how many records one fetch takes. Default 500.
	BatchSize int
	// PollInterval is how often an idle relay looks for new records (a
	// Notifier store also wakes it at once). Default 1s.
	PollInterval time.Duration
	// Lease is how long the active relay holds the outbox without
	// renewing; it renews every Lease/3. When it dies, another instance
	// takes over at most Lease after its last renewal (plus a poll of at
	// most Lease/5). Default 15s.
	Lease time.Duration
	// PublishTimeout bounds one publish call. The relay starts a call only
	// while its lease has at least this long to run, so two relays never
	// publish at once unless a call overruns it. Default Lease/3.
	PublishTimeout time.Duration
	// Backoff is the delay before a failed record is tried again, from its
	// failed attempts (1 after the first failure). Default
	// idem.ExponentialBackoff(time.Second, 5*time.Minute).
	Backoff func(attempt int) time.Duration
	// MaxAttempts parks a record after that many failed publishes. Default
	// 0: records the broker does not reject are retried without end.
	MaxAttempts int
	// Retention is how long published records are kept before cleanup
	// deletes them (an id enqueued again within it is recognised by the
	// outbox itself; after it, by the consumer's idem records). Default
	// 24h; negative: never cleaned up.
	Retention time.Duration
	// CleanupInterval is the pause between cleanups once caught up.
	// Default 1m. CleanupBatch is the records one cleanup statement
	// deletes. Default 1000. Only the relay holding the lease cleans up, a
	// batch between two publish batches.
	CleanupInterval time.Duration
	CleanupBatch    int
	// Observer receives the relay's events if it is an
	// idem.RelayObserver, and its store and listener failures if it is an
	// idem.ErrorObserver: give it the guards' observer.
	Observer idem.Observer
	// Clock returns the current time; default time.Now. Instances sharing
	// an outbox need synchronised clocks: the lease is compared across
	// them.
	Clock func() time.Time
}

func (o *RelayOptions) validate() error {
	if o.BatchSize < 0 || o.PollInterval < 0 || o.Lease < 0 || o.PublishTimeout < 0 ||
		o.MaxAttempts < 0 || o.CleanupInterval < 0 || o.CleanupBatch < 0 {
		return fmt.Errorf("%w: negative RelayOptions", ErrInvalidOptions)
	}
	if o.Owner == "" {
		host, _ := os.Hostname()
		o.Owner = host + "-" + strconv.Itoa(os.Getpid()) + "-" + rand.Text()[:8]
	}
	if o.BatchSize == 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.PollInterval == 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Lease == 0 {
		o.Lease = DefaultLease
	}
	if o.Lease < 100*time.Millisecond {
		return fmt.Errorf("%w: Lease %v is too short to renew", ErrInvalidOptions, o.Lease)
	}
	if o.PublishTimeout == 0 {
		o.PublishTimeout = o.Lease / 3
	}
	if o.PublishTimeout >= o.Lease*2/3 {
		return fmt.Errorf("%w: PublishTimeout %v must be under two thirds of the Lease %v", ErrInvalidOptions, o.PublishTimeout, o.Lease)
	}
	if o.Backoff == nil {
		o.Backoff = idem.ExponentialBackoff(time.Second, 5*time.Minute)
	}
	if o.Retention == 0 {
		o.Retention = DefaultRetention
	}
	if o.CleanupInterval == 0 {
		o.CleanupInterval = DefaultCleanupInterval
	}
	if o.CleanupBatch == 0 {
		o.CleanupBatch = DefaultCleanupBatch
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return nil
}

// Relay publishes an outbox's records through a Publisher, at least once
// and with their stable ids, and marks them published once the broker has
// confirmed them. Run it in every instance of the service: one at a time
// holds the outbox's lease and publishes, the others stand by and take over
// when it dies.
//
// A relay that dies between the broker's confirmation and the mark (or
// loses its lease meanwhile) leaves the records pending, and they are
// published again: the consumer's idem guard removes the repeat by its id.
type Relay struct {
	store Store
	pub   Publisher
	opts  RelayOptions

	running atomic.Bool
	wake    chan struct{}

	// Owned by Run's goroutine.
	lease       Lease // held; zero when not
	nextCleanup time.Time
	inflight    *marks // the last batch, while its outcomes are written
}

// NewRelay returns a relay over store publishing through pub. It validates
// opts (errors wrap ErrInvalidOptions).
func NewRelay(store Store, pub Publisher, opts RelayOptions) (*Relay, error) {
	if store == nil || pub == nil {
		return nil, fmt.Errorf("%w: NewRelay needs a Store and a Publisher", ErrInvalidOptions)
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Relay{store: store, pub: pub, opts: opts, wake: make(chan struct{}, 1)}, nil
}

// Owner is the relay's instance name in the lease.
func (r *Relay) Owner() string { return r.opts.Owner }

// Run relays until ctx ends, then releases the lease (if it holds it) and
// returns nil. Store and broker failures are reported to the Observer and
// retried. A Relay runs once at a time.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("outbox: Relay.Run is already running")
	}
	defer r.running.Store(false)
	var wg sync.WaitGroup
	lctx, stopListen := context.WithCancel(ctx)
	if n, ok := r.store.(Notifier); ok {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.listen(lctx, n)
		}()
	}
	defer func() {
		stopListen()
		wg.Wait()
		r.waitMarks()
		r.release()
	}()
	for ctx.Err() == nil {
		if !r.holdLease(ctx) {
			sleep(ctx, min(r.opts.PollInterval, r.opts.Lease/5))
			continue
		}
		full, err := r.batch(ctx)
		more := r.cleanup(ctx)
		if (full || more) && err == nil {
			continue
		}
		r.idle(ctx)
	}
	return nil
}

// idle waits for a notification, the poll interval, or the lease's renewal.
func (r *Relay) idle(ctx context.Context) {
	d := r.opts.PollInterval
	if renew := r.lease.Until.Add(-r.opts.Lease * 2 / 3).Sub(r.opts.Clock()); renew < d {
		d = max(renew, time.Millisecond)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-r.wake:
	case <-t.C:
	}
}

func (r *Relay) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Relay) listen(ctx context.Context, n Notifier) {
	for ctx.Err() == nil {
		err := n.Listen(ctx, r.poke)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("listener ended")
		}
		r.reportError(ctx, fmt.Errorf("outbox: listen: %w (polling meanwhile)", err))
		sleep(ctx, max(r.opts.PollInterval, time.Second))
	}
}

func (r *Relay) observe(ctx context.Context, e Event) {
	if ro, ok := r.opts.Observer.(idem.RelayObserver); ok {
		e.Owner = r.opts.Owner
		ro.ObserveRelay(ctx, e)
	}
}

// reportError reports a store or listener failure the relay retries.
func (r *Relay) reportError(ctx context.Context, err error) {
	if eo, ok := r.opts.Observer.(idem.ErrorObserver); ok {
		eo.ObserveError(ctx, idem.HandledError{Component: "outbox", Err: err})
	}
}

// holdLease reports whether this relay holds the lease, renewing it when a
// third of it has run (or taking it when it is free).
func (r *Relay) holdLease(ctx context.Context) bool {
	now := r.opts.Clock()
	if r.lease.Token != 0 && r.lease.Until.Sub(now) > r.opts.Lease*2/3 {
		return true
	}
	l, err := r.store.Lease(ctx, LeaseRequest{Owner: r.opts.Owner, Token: r.lease.Token, Now: now, Until: now.Add(r.opts.Lease)})
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		r.reportError(ctx, fmt.Errorf("outbox: lease: %w", err))
		if r.lease.Token != 0 && r.lease.Until.Sub(now) > r.opts.PublishTimeout {
			return true // still ours for a while; renewal is tried again
		}
		r.lose(ctx, err)
		return false
	}
	if !l.Held(r.opts.Owner, now) {
		r.lose(ctx, nil)
		return false
	}
	if l.Token != r.lease.Token {
		r.observe(ctx, Event{Kind: EventLeaseAcquired, Lease: idem.RelayLease(l)})
	}
	r.lease = l
	return true
}

func (r *Relay) lose(ctx context.Context, err error) {
	if r.lease.Token != 0 {
		r.observe(ctx, Event{Kind: EventLeaseLost, Lease: idem.RelayLease(r.lease), Err: err})
	}
	r.lease = Lease{}
}

// mayPublish reports whether the lease lasts long enough for one more
// publish call.
func (r *Relay) mayPublish(ctx context.Context) bool {
	return r.holdLease(ctx) && r.lease.Until.Sub(r.opts.Clock()) > r.opts.PublishTimeout
}

// release gives the lease up on shutdown so a standby takes over at once.
func (r *Relay) release() {
	if r.lease.Token == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l := r.lease
	r.lease = Lease{}
	// A graceful stop is a release, never a loss: lease_lost is kept for
	// takeovers and failed renewals, which an operator must look at.
	var err error
	if err = r.store.ReleaseLease(ctx, LeaseRequest{Owner: r.opts.Owner, Token: l.Token, Now: r.opts.Clock()}); err != nil {
		err = fmt.Errorf("outbox: release lease: %w", err)
		r.reportError(ctx, err)
	}
	r.observe(ctx, Event{Kind: EventLeaseReleased, Lease: idem.RelayLease(l), Err: err})
}

// marks are one batch's outcomes, written by settle while the next batch is
// fetched and published.
type marks struct {
	start     time.Time
	seqs      []int64         // every record of the batch: kept out of the next fetch until written
	blocked   map[string]bool // ordering keys with a record that did not go out
	published []int64
	failures  []Failure
	failed    []Record
	lag       time.Duration
	done      chan struct{}
}

// batch fetches one batch and publishes it in waves (see waves), starts
// writing its outcomes, and reports whether the batch was full (more may
// be waiting).
//
// The outcomes of one batch are written while the next is fetched and
// published: the next fetch leaves the batch's records out, and its
// failures hold back their keys in memory until they are written; the next
// batch's outcomes wait for them.
func (r *Relay) batch(ctx context.Context) (full bool, err error) {
	if p := r.inflight; p != nil {
		select {
		case <-p.done:
			r.inflight = nil
		default:
		}
	}
	m := &marks{start: time.Now(), blocked: map[string]bool{}, done: make(chan struct{})}
	req := FetchRequest{Now: r.opts.Clock(), Limit: r.opts.BatchSize}
	blocked := map[string]bool{} // ordering keys not to publish in this batch
	if p := r.inflight; p != nil {
		req.Exclude = p.seqs
		maps.Copy(blocked, p.blocked)
	}
	recs, err := r.store.Fetch(ctx, req)
	if err != nil {
		if ctx.Err() == nil {
			r.reportError(ctx, fmt.Errorf("outbox: fetch: %w", err))
		}
		return false, err
	}
	if len(recs) == 0 {
		return false, nil
	}
	for _, wave := range waves(recs) {
		wave = unblocked(wave, blocked)
		if len(wave) == 0 {
			continue
		}
		if !r.mayPublish(ctx) {
			break
		}
		pctx, cancel := context.WithTimeout(ctx, r.opts.PublishTimeout)
		errs := r.pub.Publish(pctx, wave)
		cancel()
		if len(errs) != len(wave) {
			errs = make([]error, len(wave))
			for i := range errs {
				errs[i] = fmt.Errorf("outbox: the publisher answered %d of %d records", len(errs), len(wave))
			}
		}
		at := r.opts.Clock()
		for i, rec := range wave {
			if errs[i] == nil {
				m.published = append(m.published, rec.Seq)
				m.lag = max(m.lag, at.Sub(rec.CreatedAt))
				continue
			}
			if rec.OrderingKey != "" {
				blocked[rec.OrderingKey] = true
			}
			if ctx.Err() != nil {
				continue // shutting down: not the record's failure
			}
			f := r.failure(rec, errs[i], at)
			m.failures = append(m.failures, f)
			rec.Attempts, rec.NextAttemptAt, rec.LastError, rec.Parked = f.Attempts, f.NextAttemptAt, f.Error, f.Park
			m.failed = append(m.failed, rec)
		}
		if ctx.Err() != nil {
			break
		}
	}
	// The next batch holds back the keys of every record of this one that
	// did not go out: failed, behind a failure, or not tried (the lease ran
	// short). Its fetch does not see the records themselves.
	sent := make(map[int64]bool, len(m.published))
	for _, seq := range m.published {
		sent[seq] = true
	}
	for _, rec := range recs {
		m.seqs = append(m.seqs, rec.Seq)
		if !sent[rec.Seq] && rec.OrderingKey != "" {
			m.blocked[rec.OrderingKey] = true
		}
	}
	r.waitMarks()
	r.inflight = m
	go func() {
		defer close(m.done)
		r.settle(ctx, m)
	}()
	return len(recs) == r.opts.BatchSize, nil
}

// waitMarks waits until the last batch's outcomes are written.
func (r *Relay) waitMarks() {
	if r.inflight != nil {
		<-r.inflight.done
		r.inflight = nil
	}
}

// settle writes a batch's outcomes and reports them. Marks are written
// even when ctx has ended: what the broker confirmed should not go out
// again just because the service is stopping.
func (r *Relay) settle(ctx context.Context, m *marks) {
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if len(m.published) > 0 {
		if err := r.store.MarkPublished(mctx, m.published, r.opts.Clock()); err != nil {
			r.reportError(ctx, fmt.Errorf("outbox: mark %d published (they will be published again): %w", len(m.published), err))
			return
		}
	}
	if len(m.failures) > 0 {
		if err := r.store.MarkFailed(mctx, m.failures); err != nil {
			r.reportError(ctx, fmt.Errorf("outbox: mark %d failed: %w", len(m.failures), err))
			return
		}
	}
	parked := 0
	for i := range m.failed {
		kind := EventFailed
		if m.failed[i].Parked {
			kind, parked = EventParked, parked+1
		}
		rec := &m.failed[i]
		r.observe(ctx, Event{Kind: kind, Err: errors.New(rec.LastError), Record: &idem.RelayRecord{Seq: rec.Seq, ID: rec.ID,
			Destination: rec.Destination, OrderingKey: rec.OrderingKey, Attempts: rec.Attempts, NextAttemptAt: rec.NextAttemptAt}})
	}
	r.observe(ctx, Event{Kind: EventBatch, Published: len(m.published), Failed: len(m.failures) - parked, Parked: parked,
		Lag: m.lag, Duration: time.Since(m.start)})
}

func (r *Relay) failure(rec Record, err error, at time.Time) Failure {
	f := Failure{Seq: rec.Seq, Attempts: rec.Attempts + 1, Error: OneLine(err.Error())}
	f.NextAttemptAt = at.Add(r.opts.Backoff(f.Attempts))
	f.Park = IsRejected(err) || (r.opts.MaxAttempts > 0 && f.Attempts >= r.opts.MaxAttempts)
	return f
}

// cleanup deletes one batch of records published before the retention
// when a cleanup is due, and reports whether more are waiting.
func (r *Relay) cleanup(ctx context.Context) (more bool) {
	now := r.opts.Clock()
	if r.opts.Retention < 0 || now.Before(r.nextCleanup) || r.lease.Token == 0 || ctx.Err() != nil {
		return false
	}
	n, err := r.store.Cleanup(ctx, CleanupRequest{Before: now.Add(-r.opts.Retention), Limit: r.opts.CleanupBatch})
	if err != nil {
		if ctx.Err() == nil {
			r.reportError(ctx, fmt.Errorf("outbox: cleanup: %w", err))
		}
		r.nextCleanup = now.Add(r.opts.CleanupInterval)
		return false
	}
	if n > 0 {
		r.observe(ctx, Event{Kind: EventCleanup, Deleted: n})
	}
	if n < r.opts.CleanupBatch {
		r.nextCleanup = now.Add(r.opts.CleanupInterval)
		return false
	}
	return true
}

// waves splits a batch (ascending Seq) into publish calls: wave i holds
// the i-th record of every ordering key in the batch, and wave 0 also every
// record without a key. Records of one key thus go out one after the
// other, each once the one before it is confirmed, while other keys go out
// together.
func waves(recs []Record) [][]Record {
	var out [][]Record
	n := map[string]int{}
	for _, rec := range recs {
		w := 0
		if rec.OrderingKey != "" {
			w = n[rec.OrderingKey]
			n[rec.OrderingKey] = w + 1
		}
		if w == len(out) {
			out = append(out, nil)
		}
		out[w] = append(out[w], rec)
	}
	return out
}

// unblocked drops the records whose ordering key had a failure.
func unblocked(wave []Record, blocked map[string]bool) []Record {
	if len(blocked) == 0 {
		return wave
	}
	out := wave[:0:0]
	for _, rec := range wave {
		if !blocked[rec.OrderingKey] {
			out = append(out, rec)
		}
	}
	return out
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
