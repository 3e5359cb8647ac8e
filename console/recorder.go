package console

import (
	"context"
	"errors"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/idemgo/idem"
)

// Recorder is an idem observer that keeps the last minutes of every scope's
// outcomes and latencies in memory, for the console's charts, with the most
// recent conflicts, parked keys and dead letters (which the consumers of
// package broker report to their guard's observer). It is the console's
// own source when no Prometheus is configured, and costs one short lock
// per message. Pass it as (or with idem.Observers beside) the guards'
// Observer and as Options.Recorder:
//
//	rec := console.NewRecorder(console.RecorderOptions{})
//	g, err := idem.New(store, idem.Options{Scope: "billing", Observer: rec})
//	mux.Handle("/idem/", console.New(store, console.Options{Recorder: rec}))
//
// A Recorder is safe for concurrent use. Its memory is bounded: Minutes
// buckets per scope for at most MaxScopes scopes (later scopes are counted
// under OtherScopes), and Recent entries of each list.
type Recorder struct {
	clock   func() time.Time
	minutes int
	max     int
	recent  int

	mu          sync.Mutex
	scopes      map[string]*scopeRing
	conflicts   []Conflict // newest last, at most recent
	parked      []Parked
	deadLetters []DeadLetter
}

// RecorderOptions configure a Recorder. The zero value works.
type RecorderOptions struct {
	// Minutes is how many recent minutes are kept per scope. Default 60.
	Minutes int
	// MaxScopes bounds the scopes kept apart. Default 64.
	MaxScopes int
	// Recent is how many conflicts, parked keys and dead letters are kept.
	// Default 100.
	Recent int
	// Clock is the time source; default time.Now.
	Clock func() time.Time
}

// OtherScopes is the scope under which a Recorder counts the events of scopes
// past RecorderOptions.MaxScopes.
const OtherScopes = "(other scopes)"

// Conflict is a key reused with other content, as an observer saw it: the
// message's fingerprint against the one the key is recorded with. Both come
// from producers and are shown as text only.
type Conflict struct {
	At                time.Time
	Key               idem.Key
	Fingerprint       string // the message's
	StoredFingerprint string // the record's
	StoredState       idem.State
}

// Parked is a key the guard left for an operator (idem.StalePark): a stale
// in-progress record met by a delivery, which was dead-lettered.
type Parked struct {
	At  time.Time
	Key idem.Key
}

// DeadLetter is a delivery a broker consumer dead-lettered, as the
// consumer engine reported it to the guard's observer (ObserveSettlement).
type DeadLetter struct {
	At     time.Time
	Key    idem.Key // zero when the message had no key
	Reason string   // idem.DeadLetterReason or the adapter's (max_deliver)
	Error  string
}

// NewRecorder returns an empty Recorder.
func NewRecorder(opts RecorderOptions) *Recorder {
	r := &Recorder{clock: opts.Clock, minutes: opts.Minutes, max: opts.MaxScopes, recent: opts.Recent,
		scopes: make(map[string]*scopeRing)}
	if r.clock == nil {
		r.clock = time.Now
	}
	if r.minutes <= 0 {
		r.minutes = 60
	}
	if r.max <= 0 {
		r.max = 64
	}
	if r.recent <= 0 {
		r.recent = 100
	}
	return r
}

var _ idem.FullObserver = (*Recorder)(nil)

// Observe implements idem.Observer.
func (r *Recorder) Observe(_ context.Context, e idem.Event) {
	now := r.clock()
	minute := now.Unix() / 60
	r.mu.Lock()
	defer r.mu.Unlock()
	ring := r.ringLocked(e.Key.Scope)
	b := ring.bucket(minute)
	if int(e.Outcome) < len(b.outcomes) {
		b.outcomes[e.Outcome]++
	}
	if e.Claim > 0 {
		b.claim.add(e.Claim)
	}
	if e.Handler > 0 {
		b.handler.add(e.Handler)
	}
	switch e.Outcome {
	case idem.OutcomeConflict:
		c := Conflict{At: now, Key: e.Key}
		var ce *idem.ConflictError
		if errors.As(e.Err, &ce) {
			c.Fingerprint, c.StoredFingerprint, c.StoredState = ce.Fingerprint, ce.Record.Fingerprint, ce.Record.State
		}
		r.conflicts = keepRecent(r.conflicts, c, r.recent)
	case idem.OutcomeStale:
		r.parked = keepRecent(r.parked, Parked{At: now, Key: e.Key}, r.recent)
	}
}

// ObserveSettlement implements idem.SettlementObserver: a dead letter
// durable at the broker is kept among the recent ones.
func (r *Recorder) ObserveSettlement(_ context.Context, s idem.Settlement) {
	if s.DeadLettered {
		r.DeadLetter(s.Result, s.Err, s.Reason)
	}
}

// ObserveStart implements idem.StartObserver: nothing to keep.
func (r *Recorder) ObserveStart(ctx context.Context, _ idem.Start) context.Context { return ctx }

// ObserveStep implements idem.StepObserver: nothing to keep.
func (r *Recorder) ObserveStep(context.Context, idem.Step) {}

// ObserveError implements idem.ErrorObserver: nothing to keep.
func (r *Recorder) ObserveError(context.Context, idem.HandledError) {}

// ObserveOutage implements idem.OutageObserver: nothing to keep.
func (r *Recorder) ObserveOutage(context.Context, idem.Outage) {}

// ObserveSweep implements idem.SweepObserver: nothing to keep.
func (r *Recorder) ObserveSweep(context.Context, idem.Sweep) {}

// ObserveRelay implements idem.RelayObserver: nothing to keep (the
// console reads the outbox itself).
func (r *Recorder) ObserveRelay(context.Context, idem.RelayEvent) {}

// DeadLetter records a dead-lettered delivery of the guard call that
// returned (res, err), with the adapter's reason.
func (r *Recorder) DeadLetter(res idem.Result, err error, reason string) {
	d := DeadLetter{At: r.clock(), Key: res.Key, Reason: reason}
	if d.Reason == "" {
		d.Reason = idem.DeadLetterReason(err)
	}
	if err != nil {
		d.Error = err.Error()
		if len(d.Error) > 1024 {
			d.Error = d.Error[:1024]
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deadLetters = keepRecent(r.deadLetters, d, r.recent)
}

func keepRecent[T any](s []T, v T, n int) []T {
	if len(s) >= n {
		copy(s, s[len(s)-n+1:])
		s = s[:n-1]
	}
	return append(s, v)
}

func (r *Recorder) ringLocked(scope string) *scopeRing {
	ring := r.scopes[scope]
	if ring != nil {
		return ring
	}
	if len(r.scopes) >= r.max {
		scope = OtherScopes
		if ring = r.scopes[scope]; ring != nil {
			return ring
		}
	}
	ring = &scopeRing{buckets: make([]minuteBucket, r.minutes)}
	r.scopes[scope] = ring
	return ring
}

// scopeRing holds one bucket per minute, indexed by the minute modulo its
// length; a bucket whose minute is not the one asked for is from an earlier
// lap and counts as empty.
type scopeRing struct{ buckets []minuteBucket }

type minuteBucket struct {
	minute   int64 // Unix minute
	outcomes [int(idem.OutcomeSuperseded) + 1]int64
	claim    latencies
	handler  latencies
}

func (s *scopeRing) bucket(minute int64) *minuteBucket {
	b := &s.buckets[int(minute%int64(len(s.buckets)))]
	if b.minute != minute {
		*b = minuteBucket{minute: minute}
	}
	return b
}

// latencies is a histogram on exponential bounds (×1.25 from 10µs): enough
// to read a percentile to within a quarter.
type latencies struct {
	n      int64
	counts [latencyBuckets]int32
}

const (
	latencyBuckets = 80
	latencyBase    = 10 * time.Microsecond
	latencyGrowth  = 1.25
)

func (l *latencies) add(d time.Duration) {
	i := 0
	if d > latencyBase {
		i = int(math.Ceil(math.Log(float64(d)/float64(latencyBase)) / math.Log(latencyGrowth)))
	}
	l.counts[min(i, latencyBuckets-1)]++
	l.n++
}

func (l *latencies) merge(o *latencies) {
	l.n += o.n
	for i, c := range o.counts {
		l.counts[i] += c
	}
}

// quantile is the upper bound of the bucket holding the q-th quantile, 0
// without samples.
func (l *latencies) quantile(q float64) time.Duration {
	if l.n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(l.n)))
	var seen int64
	for i, c := range l.counts {
		seen += int64(c)
		if seen >= rank {
			return time.Duration(float64(latencyBase) * math.Pow(latencyGrowth, float64(i)))
		}
	}
	return time.Duration(float64(latencyBase) * math.Pow(latencyGrowth, latencyBuckets-1))
}

// Minute is one scope's counts in one minute.
type Minute struct {
	Start      time.Time
	Processed  int64 // processed, reconciled
	Duplicates int64
	Conflicts  int64
	InProgress int64 // deliveries retried while another owner held the key
	Failed     int64 // handler failures, lease losses, store errors
	Parked     int64
	Superseded int64 // stale versions skipped (entity.Versioned, idem.ErrSuperseded)
	ClaimP50   time.Duration
	ClaimP99   time.Duration
	HandlerP50 time.Duration
	HandlerP99 time.Duration
}

// ScopeSeries is one scope's recent minutes, oldest first, with the
// latency percentiles over all of them.
type ScopeSeries struct {
	Scope   string
	Minutes []Minute
	Total   Minute // sums over the window; percentiles over the window
}

// Series returns every scope's last minutes up to now, oldest minute first,
// scopes in name order.
func (r *Recorder) Series() []ScopeSeries {
	now := r.clock().Unix() / 60
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]ScopeSeries, 0, len(r.scopes))
	for scope, ring := range r.scopes {
		s := ScopeSeries{Scope: scope, Minutes: make([]Minute, 0, r.minutes)}
		var claim, handler latencies
		for m := now - int64(r.minutes) + 1; m <= now; m++ {
			b := &ring.buckets[int(((m%int64(r.minutes))+int64(r.minutes))%int64(r.minutes))]
			mm := Minute{Start: time.Unix(m*60, 0).UTC()}
			if b.minute == m {
				o := &b.outcomes
				mm.Processed = o[idem.OutcomeProcessed] + o[idem.OutcomeReconciled]
				mm.Duplicates = o[idem.OutcomeDuplicate]
				mm.Conflicts = o[idem.OutcomeConflict]
				mm.InProgress = o[idem.OutcomeInProgress]
				mm.Failed = o[idem.OutcomeFailed] + o[idem.OutcomeLeaseLost] + o[idem.OutcomeStoreError]
				mm.Parked = o[idem.OutcomeStale]
				mm.Superseded = o[idem.OutcomeSuperseded]
				mm.ClaimP50, mm.ClaimP99 = b.claim.quantile(0.5), b.claim.quantile(0.99)
				mm.HandlerP50, mm.HandlerP99 = b.handler.quantile(0.5), b.handler.quantile(0.99)
				claim.merge(&b.claim)
				handler.merge(&b.handler)
			}
			s.Total.Processed += mm.Processed
			s.Total.Duplicates += mm.Duplicates
			s.Total.Conflicts += mm.Conflicts
			s.Total.InProgress += mm.InProgress
			s.Total.Failed += mm.Failed
			s.Total.Parked += mm.Parked
			s.Total.Superseded += mm.Superseded
			s.Minutes = append(s.Minutes, mm)
		}
		s.Total.ClaimP50, s.Total.ClaimP99 = claim.quantile(0.5), claim.quantile(0.99)
		s.Total.HandlerP50, s.Total.HandlerP99 = handler.quantile(0.5), handler.quantile(0.99)
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Scope < out[j].Scope })
	return out
}

// Conflicts returns the recent conflicts, newest first.
func (r *Recorder) Conflicts() []Conflict {
	r.mu.Lock()
	defer r.mu.Unlock()
	return reversed(r.conflicts)
}

// ParkedKeys returns the keys recently parked for an operator, newest first.
func (r *Recorder) ParkedKeys() []Parked {
	r.mu.Lock()
	defer r.mu.Unlock()
	return reversed(r.parked)
}

// DeadLetters returns the recent dead letters, newest first.
func (r *Recorder) DeadLetters() []DeadLetter {
	r.mu.Lock()
	defer r.mu.Unlock()
	return reversed(r.deadLetters)
}

func reversed[T any](s []T) []T {
	out := make([]T, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}
