package idem_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
)

// slowRenewals is a store whose renewals reach it late, as over a slow
// network (issue 37: PostgreSQL behind a latency proxy): what extends a
// lease is the renewal's arrival, while the lease it sets is counted from
// its sending. Claims arrive at once, so a rival claims a lease the moment
// it lapses.
type slowRenewals struct {
	idem.Store
	latency time.Duration
}

func (s slowRenewals) Renew(ctx context.Context, req idem.RenewRequest) error {
	t := time.NewTimer(s.latency)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.Renew(ctx, req)
}

// holders counts the handler runs of each key under way, and notes each
// one that began while another of its key ran.
type holders struct {
	mu       sync.Mutex
	running  map[string]int
	overlaps []string
}

func (o *holders) enter(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.running[id]++
	if o.running[id] > 1 {
		o.overlaps = append(o.overlaps, id)
	}
}

// overlapped reports whether two runs of a key ever overlapped.
func (o *holders) overlapped() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.overlaps) > 0
}

func (o *holders) leave(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.running[id]--
}

// No two holders of a key run at once (issue 37, item 7): two guards over
// one store whose renewals arrive later than Lease/3, workers of each
// redelivering every key until one of them has processed it, and a
// handler longer than the lease. Renewals counted from their answers let
// the lease lapse between two of them: a rival found the live holder's key
// stale, and parked it (the default) or retook it and ran its handler
// beside the first (StaleRetake). Renewals due from the lease's end keep
// the lease, and a holder whose renewal could not answer in time stops
// before its lease ends.
func TestNoTwoHoldersRunAtOnce(t *testing.T) {
	const (
		lease     = 600 * time.Millisecond
		latency   = 230 * time.Millisecond // beyond Lease/3: renewals run back to back
		work      = 900 * time.Millisecond // longer than the lease
		keys      = 2
		workers   = 2 // per guard
		redeliver = 10 * time.Millisecond
	)
	for _, stale := range []idem.StalePolicy{idem.StaleRetake, idem.StaleDefault} {
		t.Run(stale.String(), func(t *testing.T) {
			base := memory.New()
			s := slowRenewals{Store: base, latency: latency}
			opts := idem.Options{Scope: "holders", Lease: lease, Stale: stale}
			guards := []*idem.Guard{guard(t, s, opts), guard(t, s, opts)}
			o := &holders{running: map[string]int{}}
			h := func(ctx context.Context) ([]byte, error) {
				key, _ := idem.KeyFromContext(ctx)
				o.enter(key.ID)
				defer o.leave(key.ID)
				done := time.NewTimer(work)
				defer done.Stop()
				select {
				case <-done.C:
					return []byte("done"), nil
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			}
			within(t, "the workers", func() {
				var wg sync.WaitGroup
				for _, g := range guards {
					for range workers {
						wg.Go(func() {
							for k := range keys {
								msg := idem.Message{ID: fmt.Sprintf("order-%d", k), Payload: []byte("p")}
								for !o.overlapped() { // else the test has failed: stop
									res, err := g.Do(context.Background(), msg, h)
									if err == nil {
										break // processed here, or a duplicate of another's
									}
									if idem.Decide(res, err) != idem.ActionRetry {
										t.Errorf("%s: %v %v; a live holder's key looked stale", msg.ID, res.Outcome, err)
										return
									}
									<-time.After(redeliver) // the broker's redelivery delay
								}
							}
						})
					}
				}
				wg.Wait()
			})
			if len(o.overlaps) > 0 {
				t.Fatalf("two holders of %s ran at once", o.overlaps[0])
			}
			for k := range keys {
				r, err := base.Get(context.Background(), idem.Key{Scope: "holders", ID: fmt.Sprintf("order-%d", k)})
				if err != nil || r.State != idem.StateCompleted || string(r.Result) != "done" {
					t.Errorf("order-%d: %+v %v; want completed by a handler that ran to its end", k, r, err)
				}
			}
		})
	}
}

// failingRenewals is a store whose renewals fail at once (a store down).
type failingRenewals struct{ idem.Store }

func (failingRenewals) Renew(context.Context, idem.RenewRequest) error {
	return errors.New("connection reset")
}

// A holder that could not renew in time is told so before its lease ends:
// its handler's context is cancelled with cause ErrLeaseLost while the
// store still holds the lease for it, so no rival's claim can have taken
// the key yet. A handler that stops gets its key given back for the
// redelivery; one that finishes anyway has done its effect, and its key is
// completed (fencing decides, and no rival took it).
func TestUnrenewedLeaseStopsHandlerBeforeItEnds(t *testing.T) {
	const lease = 600 * time.Millisecond
	for _, tc := range []struct {
		name   string
		wrap   func(idem.Store) idem.Store
		finish bool // the handler finishes its work although told to stop
	}{
		{"renewals fail", func(s idem.Store) idem.Store { return failingRenewals{s} }, false},
		{"renewals hang", func(s idem.Store) idem.Store { return &hangingRenew{Store: s} }, false},
		{"renewals fail, handler finishes anyway", func(s idem.Store) idem.Store { return failingRenewals{s} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := memory.New()
			g := guard(t, tc.wrap(base), idem.Options{Lease: lease})
			key := idem.Key{Scope: "test", ID: "unrenewed"}
			var (
				cause error
				held  bool
			)
			res, err := g.DoKey(context.Background(), key, "", func(ctx context.Context) ([]byte, error) {
				bound := time.NewTimer(10 * lease)
				defer bound.Stop()
				select {
				case <-ctx.Done():
				case <-bound.C:
					return nil, errors.New("the handler ran on ten leases past its lease's end")
				}
				cause = context.Cause(ctx)
				r, err := base.Get(context.Background(), key)
				held = err == nil && r.State == idem.StateInProgress && time.Now().Before(r.LeaseUntil)
				if tc.finish {
					return []byte("done"), nil
				}
				return nil, cause
			})
			if !errors.Is(cause, idem.ErrLeaseLost) {
				t.Fatalf("handler's cause %v, want ErrLeaseLost", cause)
			}
			if !held {
				t.Error("the handler was told after its lease had ended: a rival could have run beside it")
			}
			r, gerr := base.Get(context.Background(), key)
			if tc.finish {
				if err != nil || res.Outcome != idem.OutcomeProcessed || gerr != nil || r.State != idem.StateCompleted || string(r.Result) != "done" {
					t.Errorf("Do: %v %v, record %+v %v; want the finished effect completed", res.Outcome, err, r, gerr)
				}
				return
			}
			if !errors.Is(err, idem.ErrLeaseLost) || res.Outcome != idem.OutcomeLeaseLost || idem.Decide(res, err) != idem.ActionRetry {
				t.Errorf("Do: %v %v; want a lost lease to retry", res.Outcome, err)
			}
			if gerr != nil || r.State != idem.StateReleased || res.Record.State != idem.StateReleased {
				t.Errorf("record %+v %v, result's %s; want released for the redelivery", r, gerr, res.Record.State)
			}
		})
	}
}

// lateClaims is a store that answers claims late: the record is claimed
// at once, the answer comes after late.
type lateClaims struct {
	idem.Store
	late time.Duration
}

func (s lateClaims) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	c, err := s.Store.Claim(ctx, req)
	<-time.After(s.late)
	return c, err
}

// A claim whose lease has ended (or is about to) by the time its answer is
// at hand starts no handler: a rival may hold the key by then. The claim
// is given back and the call reports a lost lease, which the broker
// retries. Likewise for a Reconcile that returns after the lease ended.
func TestLateAnswerStartsNoHandler(t *testing.T) {
	const lease = 50 * time.Millisecond
	key := idem.Key{Scope: "test", ID: "late"}
	for _, tc := range []struct {
		name  string
		store func(base idem.Store) idem.Store
		opts  idem.Options
	}{
		{
			name:  "claim answered after the lease",
			store: func(base idem.Store) idem.Store { return lateClaims{Store: base, late: lease + lease/5} },
			opts:  idem.Options{Lease: lease},
		},
		{
			name: "reconcile returned after the lease",
			store: func(base idem.Store) idem.Store {
				// A stale record: its owner crashed an hour ago.
				past := time.Now().Add(-time.Hour)
				if _, err := base.Claim(context.Background(), idem.ClaimRequest{Key: key, Now: past, LeaseUntil: past.Add(lease), ExpiresAt: past.Add(24 * time.Hour)}); err != nil {
					t.Fatal(err)
				}
				return base
			},
			opts: idem.Options{Lease: lease, Stale: idem.StaleReconcile, Reconcile: func(context.Context, idem.Record) ([]byte, bool, error) {
				<-time.After(lease + lease/5) // asks a slow service whether the effect happened
				return nil, false, nil
			}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := memory.New()
			g := guard(t, tc.store(base), tc.opts)
			ran := false
			res, err := g.DoKey(context.Background(), key, "", func(context.Context) ([]byte, error) {
				ran = true
				return nil, nil
			})
			if ran {
				t.Error("the handler ran on a lease that had ended")
			}
			if !errors.Is(err, idem.ErrLeaseLost) || res.Outcome != idem.OutcomeLeaseLost || idem.Decide(res, err) != idem.ActionRetry {
				t.Errorf("Do: %v %v; want a lost lease to retry", res.Outcome, err)
			}
			if r, err := base.Get(context.Background(), key); err != nil || r.State != idem.StateReleased || res.Record.State != idem.StateReleased {
				t.Errorf("record %+v %v, result's %s; want released for the redelivery", r, err, res.Record.State)
			}
		})
	}
}

// downAfterClaim is a store that goes down once its claim answered:
// renewals and releases fail as a store refusing connections does.
type downAfterClaim struct{ idem.Store }

func (downAfterClaim) Renew(context.Context, idem.RenewRequest) error {
	return errors.New("dial tcp: connection refused")
}

func (downAfterClaim) Release(context.Context, idem.ReleaseRequest) error {
	return errors.New("dial tcp: connection refused")
}

// TestLeaseRunOutInOutageIsStoreError: a handler whose lease ran out
// because the store went down (renewals and the release fail) reports a
// retryable *StoreError wrapping ErrLeaseLost, so that a broker consumer
// holds the delivery as for any store outage instead of spending one of
// the broker's deliveries; the record stays in progress for the Stale
// policy to decide once the store is back.
func TestLeaseRunOutInOutageIsStoreError(t *testing.T) {
	const lease = 300 * time.Millisecond
	base := memory.New()
	g := guard(t, downAfterClaim{base}, idem.Options{Lease: lease})
	key := idem.Key{Scope: "test", ID: "outage"}
	res, err := g.DoKey(context.Background(), key, "", func(ctx context.Context) ([]byte, error) {
		<-ctx.Done()
		return nil, context.Cause(ctx)
	})
	var se *idem.StoreError
	if !errors.As(err, &se) || !errors.Is(err, idem.ErrLeaseLost) || res.Outcome != idem.OutcomeStoreError || idem.Decide(res, err) != idem.ActionRetry {
		t.Fatalf("Do: %v %v; want a retryable store error wrapping ErrLeaseLost", res.Outcome, err)
	}
	if r, gerr := base.Get(context.Background(), key); gerr != nil || r.State != idem.StateInProgress {
		t.Fatalf("record %+v %v; want it left in progress for the Stale policy", r, gerr)
	}
}
