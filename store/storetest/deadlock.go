package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

// Sizes of testContendedSweep: dense enough that lock-order faults show up
// in most runs (a sweep that locks its index before the rows, a batch that
// locks new and existing keys in two passes), short enough for every run.
const (
	contendWorkers = 8
	contendOps     = 100 // per worker
	contendKeys    = 6
)

// testContendedSweep: sweeps, claims, batch claims (where the store has
// ClaimBatch), completes, renewals and releases from several goroutines on
// a few shared keys, many of them expired, over a bounded number of calls.
// No call may fail: a deadlock between two of them (a server's retryable
// error, returned because the store did not retry it or kept meeting it)
// fails the case with the call that met it. ErrLeaseLost is an answer, not
// a failure: the workers' tokens go stale all the time.
func testContendedSweep(t *testing.T, s idem.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, batches := s.(storekit.BatchStore)
	seed := rand.Uint64()
	var (
		mu   sync.Mutex
		errs []string
		wg   sync.WaitGroup
	)
	for w := range contendWorkers {
		wg.Go(func() {
			cw := contender{s: s, rng: rand.New(rand.NewPCG(seed, uint64(w))), batches: batches, tokens: map[idem.Key]int64{}}
			for op := range contendOps {
				if ctx.Err() != nil {
					return
				}
				call, err := cw.step(ctx)
				if err == nil || errors.Is(err, idem.ErrLeaseLost) {
					continue
				}
				mu.Lock()
				errs = append(errs, fmt.Sprintf("worker %d call %d: %s: %v", w, op, call, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for i, e := range errs {
		if i == 5 {
			t.Errorf("... and %d more", len(errs)-i)
			break
		}
		t.Error(e)
	}
	if len(errs) > 0 {
		t.Logf("%d of %d calls failed (seed %d)", len(errs), contendWorkers*contendOps, seed)
	}
}

// contender is one worker of testContendedSweep: its random source and the
// tokens of the claims it won.
type contender struct {
	s       idem.Store
	rng     *rand.Rand
	batches bool
	tokens  map[idem.Key]int64
}

// step makes one random call and returns its description and error. The
// caller's clock jumps about within a few leases, so records are often
// expired (retention 2s, lease 1s) and the sweep finds some most times.
func (c *contender) step(ctx context.Context) (string, error) {
	now := T0.Add(time.Duration(c.rng.IntN(8000)) * time.Millisecond)
	k := key(fmt.Sprintf("contended-%d", c.rng.IntN(contendKeys)))
	token, held := c.tokens[k]
	switch p := c.rng.IntN(100); {
	case p < 25:
		n := 1 + c.rng.IntN(contendKeys)
		got, err := c.s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: n})
		return fmt.Sprintf("Sweep(limit %d) = %d", n, got), err
	case p < 40 && c.batches:
		perm := c.rng.Perm(contendKeys)[:2+c.rng.IntN(contendKeys-1)]
		reqs := make([]idem.ClaimRequest, len(perm))
		for i, j := range perm {
			reqs[i] = c.claimReq(key(fmt.Sprintf("contended-%d", j)), now)
		}
		claims, err := idem.ClaimBatch(ctx, c.s, reqs)
		for i, cl := range claims {
			c.took(reqs[i].Key, cl)
		}
		return fmt.Sprintf("ClaimBatch(%d keys)", len(reqs)), err
	case p < 65 && held:
		delete(c.tokens, k)
		return fmt.Sprintf("Complete(%s, token %d)", k, token), c.s.Complete(ctx, idem.CompleteRequest{
			Key: k, Token: token, Result: []byte("r"), Now: now, ExpiresAt: now.Add(2 * time.Second)})
	case p < 75 && held:
		return fmt.Sprintf("Renew(%s, token %d)", k, token), c.s.Renew(ctx, idem.RenewRequest{
			Key: k, Token: token, Now: now, LeaseUntil: now.Add(time.Second)})
	case p < 80 && held:
		delete(c.tokens, k)
		return fmt.Sprintf("Release(%s, token %d)", k, token), c.s.Release(ctx, idem.ReleaseRequest{Key: k, Token: token, Now: now})
	default:
		cl, err := c.s.Claim(ctx, c.claimReq(k, now))
		c.took(k, cl)
		return fmt.Sprintf("Claim(%s)", k), err
	}
}

func (c *contender) claimReq(k idem.Key, now time.Time) idem.ClaimRequest {
	return idem.ClaimRequest{Key: k, Fingerprint: "fp", Now: now,
		LeaseUntil: now.Add(time.Second), ExpiresAt: now.Add(2 * time.Second), TakeOverStale: true}
}

func (c *contender) took(k idem.Key, cl idem.Claim) {
	if cl.Outcome == idem.ClaimAcquired {
		c.tokens[k] = cl.Record.Token
	}
}
