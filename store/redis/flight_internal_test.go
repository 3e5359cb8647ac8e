package redisidem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
)

// TestFlightsCoalesce holds a flight out, queues calls behind it and lands
// it: the queue goes as one pipeline and every caller gets its own reply,
// its own script error, and, for a script Redis has never seen (NOSCRIPT in
// the pipeline), its reply after the store sends the source.
func TestFlightsCoalesce(t *testing.T) {
	s := internalStore(t)
	var b [8]byte
	_, _ = rand.Read(b[:])
	echo := goredis.NewScript("return tonumber(ARGV[1])")
	fail := goredis.NewScript("return redis.error_reply('boom ' .. ARGV[1])")
	// A unique comment gives a SHA no server has cached.
	fresh := goredis.NewScript("-- " + hex.EncodeToString(b[:]) + "\nreturn redis.call('INCR', KEYS[1]) * 0 + tonumber(ARGV[1])")

	var f flights
	f.out = maxOut // flights are out
	const n = 30
	type reply struct {
		n   int64
		err error
	}
	replies := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		script := []*goredis.Script{echo, fail, fresh}[i%3]
		wg.Go(func() {
			c := &fencedCall{ctx: context.Background(), script: script, key: s.prefix + ":k" + strconv.Itoa(i),
				args: []any{strconv.Itoa(i)}}
			replies[i].n, replies[i].err = f.run(s.client, c)
		})
	}
	landWhenQueued(t, &f, n)
	wg.Wait()
	for i, r := range replies {
		if i%3 == 1 {
			if r.err == nil || r.err.Error() != "boom "+strconv.Itoa(i) {
				t.Errorf("call %d: err %v, want boom %d", i, r.err, i)
			}
			continue
		}
		if r.err != nil || r.n != int64(i) {
			t.Errorf("call %d = %d, %v; want %d", i, r.n, r.err, i)
		}
	}
	// Each NOSCRIPT call ran exactly once.
	for i := 2; i < n; i += 3 {
		if v, _ := s.client.Get(context.Background(), s.prefix+":k"+strconv.Itoa(i)).Int64(); v != 1 {
			t.Errorf("fresh script on k%d ran %d times, want 1", i, v)
		}
	}
	if f.out != maxOut-1 || len(f.queue) != 0 {
		t.Fatalf("after landing: %d out, %d queued", f.out, len(f.queue))
	}
}

// TestConcurrentCompletionsKeepTheirFences: 200 goroutines complete or
// release at once, half of them with a token that is no longer current.
// Coalesced into shared pipelines, each still gets its own verdict. With
// IDEM_REDIS_CLUSTER set it runs on that cluster too, where one pipeline
// spans the masters.
func TestConcurrentCompletionsKeepTheirFences(t *testing.T) {
	t.Run("node", func(t *testing.T) { concurrentCompletions(t, internalStore(t)) })
	t.Run("cluster", func(t *testing.T) {
		addrs := os.Getenv("IDEM_REDIS_CLUSTER")
		if addrs == "" {
			t.Skip("IDEM_REDIS_CLUSTER is not set (comma-separated cluster seed addresses)")
		}
		c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: strings.Split(addrs, ",")})
		t.Cleanup(func() { c.Close() })
		var b [6]byte
		_, _ = rand.Read(b[:])
		s, err := New(c, Options{Prefix: "idemtest:int:" + hex.EncodeToString(b[:])})
		if err != nil {
			t.Fatal(err)
		}
		concurrentCompletions(t, s)
	})
}

func concurrentCompletions(t *testing.T, s *Store) {
	ctx := context.Background()
	now := time.Now()
	const n = 200
	tokens := make([]int64, n)
	for i := range n {
		k := idem.Key{Scope: "flight", ID: strconv.Itoa(i)}
		req := idem.ClaimRequest{Key: k, Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
		c, err := s.Claim(ctx, req)
		if err != nil || c.Outcome != idem.ClaimAcquired {
			t.Fatalf("claim %d: %v %v", i, c.Outcome, err)
		}
		tokens[i] = c.Record.Token
		if i%2 == 1 { // lost: released and claimed again, so the first token is stale
			if err := s.Release(ctx, idem.ReleaseRequest{Key: k, Token: c.Record.Token, Now: now}); err != nil {
				t.Fatal(err)
			}
			if c, err = s.Claim(ctx, req); err != nil || c.Outcome != idem.ClaimAcquired {
				t.Fatalf("reclaim %d: %v %v", i, c.Outcome, err)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			k := idem.Key{Scope: "flight", ID: strconv.Itoa(i)}
			if i%4 < 2 {
				errs[i] = s.Complete(ctx, idem.CompleteRequest{Key: k, Token: tokens[i], Result: []byte(strconv.Itoa(i)),
					Now: now, ExpiresAt: now.Add(time.Hour)})
			} else {
				errs[i] = s.Release(ctx, idem.ReleaseRequest{Key: k, Token: tokens[i], Now: now})
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		k := idem.Key{Scope: "flight", ID: strconv.Itoa(i)}
		r, gerr := s.Get(ctx, k)
		if gerr != nil {
			t.Fatal(gerr)
		}
		switch {
		case i%2 == 1:
			if !errors.Is(err, idem.ErrLeaseLost) || r.State != idem.StateInProgress {
				t.Errorf("key %d (stale token): err %v, state %s; want ErrLeaseLost, in_progress", i, err, r.State)
			}
		case i%4 == 0:
			if err != nil || r.State != idem.StateCompleted || string(r.Result) != strconv.Itoa(i) {
				t.Errorf("key %d: err %v, state %s, result %q", i, err, r.State, r.Result)
			}
		default:
			if err != nil || r.State != idem.StateReleased {
				t.Errorf("key %d: err %v, state %s; want released", i, err, r.State)
			}
		}
	}
}

// A shared pipeline outlives a caller that gave up, and ends at the latest
// deadline when every caller has one.
func TestBatchContext(t *testing.T) {
	type key struct{}
	base := context.WithValue(context.Background(), key{}, "leader")
	cancelled, cancel := context.WithCancel(base)
	cancel()
	soon, c1 := context.WithTimeout(context.Background(), time.Minute)
	defer c1()
	late, c2 := context.WithTimeout(context.Background(), time.Hour)
	defer c2()

	ctx, done := batchContext([]*fencedCall{{ctx: cancelled}, {ctx: late}})
	defer done()
	if ctx.Err() != nil || ctx.Value(key{}) != "leader" {
		t.Fatalf("leader gave up: err %v, value %v; want live with the leader's values", ctx.Err(), ctx.Value(key{}))
	}
	if _, ok := ctx.Deadline(); ok {
		t.Fatal("a caller without a deadline: want none")
	}
	ctx, done2 := batchContext([]*fencedCall{{ctx: soon}, {ctx: late}})
	defer done2()
	want, _ := late.Deadline()
	if d, ok := ctx.Deadline(); !ok || !d.Equal(want) {
		t.Fatalf("deadline %v %v, want the latest %v", d, ok, want)
	}
}

// panicHook panics in every pipeline, as a broken client hook might.
type panicHook struct{}

func (panicHook) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (panicHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (panicHook) ProcessPipelineHook(goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(context.Context, []goredis.Cmder) error { panic("hook") }
}

// A panic while a shared pipeline runs reaches its leader; the callers
// queued with it get an error instead of waiting for ever, and the flight
// lands.
func TestFlightsPanicReleasesWaiters(t *testing.T) {
	s := internalStore(t)
	c := goredis.NewClient(&goredis.Options{Addr: s.client.(*goredis.Client).Options().Addr})
	defer c.Close()
	c.AddHook(panicHook{})
	script := goredis.NewScript("return 1")
	var f flights
	f.out = maxOut
	const n = 3
	errs := make([]error, n)
	panics := make([]any, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			defer func() { panics[i] = recover() }()
			_, errs[i] = f.run(c, &fencedCall{ctx: context.Background(), script: script, key: s.prefix + ":p"})
		})
	}
	landWhenQueued(t, &f, n)
	wg.Wait()
	var panicked, failed int
	for i := range n {
		switch {
		case panics[i] != nil:
			panicked++
		case errs[i] != nil:
			failed++
		}
	}
	if panicked != 1 || failed != n-1 {
		t.Fatalf("%d panicked, %d failed; want 1 and %d (errs %v)", panicked, failed, n-1, errs)
	}
	if f.out != maxOut-1 || len(f.queue) != 0 {
		t.Fatalf("after the panic: %d out, %d queued", f.out, len(f.queue))
	}
}

// landWhenQueued waits until n calls queue behind the flights out, then
// lands one of them.
func landWhenQueued(t *testing.T, f *flights, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		f.mu.Lock()
		queued := len(f.queue)
		f.mu.Unlock()
		if queued == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d calls queued behind the flights", queued, n)
		}
	}
	f.land()
}
