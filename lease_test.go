package idem_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
)

// renewCounter counts each key's successful renewals and closes the key's
// channel at the second.
type renewCounter struct {
	*memory.Store
	mu     sync.Mutex
	counts map[string]int
	twice  map[string]chan struct{}
}

func (r *renewCounter) renewedTwice(id string) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.twice[id] == nil {
		r.twice[id] = make(chan struct{})
	}
	return r.twice[id]
}

func (r *renewCounter) Renew(ctx context.Context, req idem.RenewRequest) error {
	err := r.Store.Renew(ctx, req)
	if err == nil {
		r.renewedTwice(req.Key.ID) // make the channel
		r.mu.Lock()
		r.counts[req.Key.ID]++
		if r.counts[req.Key.ID] == 2 {
			close(r.twice[req.Key.ID])
		}
		r.mu.Unlock()
	}
	return err
}

// One heartbeat serves every handler of a guard: long handlers that start
// at different times are each renewed again and again, while short ones
// join and leave it around them.
func TestHeartbeatRenewsEveryLongHandler(t *testing.T) {
	s := &renewCounter{Store: memory.New(), counts: map[string]int{}, twice: map[string]chan struct{}{}}
	g := guard(t, s, idem.Options{Lease: 300 * time.Millisecond})
	const long = 4
	within(t, "the long handlers", func() {
		var wg sync.WaitGroup
		started := make(chan struct{})
		for i := range long {
			id := fmt.Sprintf("long-%d", i)
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := g.Do(context.Background(), idem.Message{ID: id}, func(context.Context) ([]byte, error) {
					started <- struct{}{}
					<-s.renewedTwice(id)
					return nil, nil
				})
				if err != nil {
					t.Errorf("%s: %v", id, err)
				}
			}()
			<-started // the next one joins later, behind it on the heartbeat
			for j := range 20 {
				if _, err := g.Do(context.Background(), idem.Message{ID: fmt.Sprintf("short-%d-%d", i, j)}, ok("")); err != nil {
					t.Errorf("short: %v", err)
				}
			}
		}
		wg.Wait()
	})
}

// Record times come from Options.Clock: the guard reuses its own readings
// of time.Now only while Clock is the default, also for a guard made from
// another's Options with a Clock of its own, and for one made by With.
func TestRecordTimesFollowClock(t *testing.T) {
	s := memory.New()
	base := guard(t, s, idem.Options{})
	c := newClock()
	opts := base.Options()
	opts.Clock = c.Now
	own, err := idem.New(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	with, err := own.With("other", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []*idem.Guard{own, with} {
		res, err := g.Do(context.Background(), idem.Message{ID: "m"}, ok("r"))
		if err != nil {
			t.Fatal(err)
		}
		r, _ := s.Get(context.Background(), res.Key)
		if !r.CreatedAt.Equal(c.Now()) || !r.UpdatedAt.Equal(c.Now()) || !r.ExpiresAt.Equal(c.Now().Add(opts.Retention)) {
			t.Fatalf("%s: record times %v, %v, %v, want the guard's clock %v", res.Key.Scope, r.CreatedAt, r.UpdatedAt, r.ExpiresAt, c.Now())
		}
	}
}
