package redisidem_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testenv"
	redisidem "github.com/idemgo/idem/store/redis"
	"github.com/idemgo/idem/store/storetest"
)

var runID = func() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

var prefixSeq atomic.Int64

// newClient connects to the test Redis (or skips) and closes the client at
// the end of the test.
func newClient(t testing.TB) *goredis.Client {
	t.Helper()
	addr := testenv.Redis.Need(t)
	c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 32})
	t.Cleanup(func() { c.Close() })
	return c
}

// backend is a Redis the portable tests run on: the standalone test server
// (standalone), or a Redis Cluster (cluster_test.go runs them all on one).
type backend struct {
	// client returns a new client, closed when the test ends.
	client func(t testing.TB) goredis.UniversalClient
}

var standalone = backend{client: func(t testing.TB) goredis.UniversalClient { return newClient(t) }}

// uniquePrefix returns a key prefix no other test (or run) uses and deletes
// every key under it when the test ends.
func uniquePrefix(t testing.TB, c goredis.UniversalClient) string {
	t.Helper()
	p := "idemtest:" + runID + ":" + strconv.FormatInt(prefixSeq.Add(1), 10)
	t.Cleanup(func() { deletePrefix(t, c, p) })
	return p
}

// deletePrefix deletes every key under prefix: on each master of a cluster,
// one key per command (a command's keys must share a slot there).
func deletePrefix(t testing.TB, c goredis.UniversalClient, prefix string) {
	ctx := context.Background()
	cc, ok := c.(*goredis.ClusterClient)
	if !ok {
		deleteOnNode(t, c, prefix, false)
		return
	}
	err := cc.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
		deleteOnNode(t, n, prefix, true)
		return nil
	})
	if err != nil {
		t.Errorf("cleanup %s: %v", prefix, err)
	}
}

func deleteOnNode(t testing.TB, c goredis.UniversalClient, prefix string, oneByOne bool) {
	ctx := context.Background()
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, prefix+":*", 1000).Result()
		if err != nil {
			t.Errorf("cleanup scan %s: %v", prefix, err)
			return
		}
		if len(keys) > 0 {
			var err error
			if oneByOne {
				_, err = c.Pipelined(ctx, func(p goredis.Pipeliner) error {
					for _, k := range keys {
						p.Unlink(ctx, k)
					}
					return nil
				})
			} else {
				err = c.Unlink(ctx, keys...).Err()
			}
			if err != nil {
				t.Errorf("cleanup unlink: %v", err)
				return
			}
		}
		if next == 0 {
			return
		}
		cursor = next
	}
}

func newStore(t testing.TB, c goredis.UniversalClient) *redisidem.Store {
	t.Helper()
	s, err := redisidem.New(c, redisidem.Options{Prefix: uniquePrefix(t, c)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) { testConformance(t, standalone) }

func testConformance(t *testing.T, on backend) {
	c := on.client(t)
	storetest.Run(t, func(t *testing.T) idem.Store { return newStore(t, c) })
}

func TestNewValidatesOptions(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	s, err := redisidem.New(c, redisidem.Options{})
	if err != nil || s.Prefix() != redisidem.DefaultPrefix {
		t.Fatalf("zero Options: %v, prefix %q", err, s.Prefix())
	}
	for _, p := range []string{"a{b}", "a}b", "idem*", "x?", "sp ace", "[x]", `back\slash`, string(make([]byte, 65))} {
		if _, err := redisidem.New(c, redisidem.Options{Prefix: p}); !errors.Is(err, idem.ErrInvalidOptions) {
			t.Errorf("prefix %q: err = %v, want ErrInvalidOptions", p, err)
		}
	}
	for _, p := range []string{"idem", "app:idem", "team/app.v2_x-y"} {
		if _, err := redisidem.New(c, redisidem.Options{Prefix: p}); err != nil {
			t.Errorf("prefix %q: %v", p, err)
		}
	}
	if _, err := redisidem.New(nil, redisidem.Options{}); !errors.Is(err, idem.ErrInvalidOptions) {
		t.Errorf("nil client: %v", err)
	}
}

// closedAddr returns an address nothing listens on.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestRedisDown: every operation against a client pointed at a closed port
// returns an error, never an outcome, and the Guard neither runs the handler
// nor lets the message be acked.
func TestRedisDown(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: closedAddr(t), MaxRetries: -1, DialTimeout: time.Second,
		DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	defer c.Close()
	s, err := redisidem.New(c, redisidem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	k := idem.Key{Scope: "s", ID: "down"}
	req := idem.ClaimRequest{Key: k, Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
	if cl, err := s.Claim(ctx, req); err == nil || cl.Outcome == idem.ClaimAcquired || idem.IsPermanent(err) {
		t.Fatalf("Claim = %v, %v; want a retryable error and no acquisition", cl.Outcome, err)
	}
	if cls, err := s.ClaimBatch(ctx, []idem.ClaimRequest{req}); err == nil || cls != nil || idem.IsPermanent(err) {
		t.Fatalf("ClaimBatch = %v, %v; want a retryable error and no claims", cls, err)
	}
	for name, err := range map[string]error{
		"Complete": s.Complete(ctx, idem.CompleteRequest{Key: k, Token: 1, Now: now, ExpiresAt: now.Add(time.Hour)}),
		"Release":  s.Release(ctx, idem.ReleaseRequest{Key: k, Token: 1, Now: now}),
		"Renew":    s.Renew(ctx, idem.RenewRequest{Key: k, Token: 1, Now: now, LeaseUntil: now.Add(time.Minute)}),
	} {
		if err == nil || errors.Is(err, idem.ErrLeaseLost) || errors.Is(err, idem.ErrInvalidData) {
			t.Errorf("%s = %v, want a retryable connection error (not ErrLeaseLost or ErrInvalidData)", name, err)
		}
	}
	if _, err := s.Get(ctx, k); err == nil || errors.Is(err, idem.ErrNotFound) {
		t.Errorf("Get = %v, want a connection error (not ErrNotFound)", err)
	}
	if _, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: 10}); err == nil {
		t.Error("Sweep succeeded against a closed port")
	}
	if _, err := s.List(ctx, idem.ListFilter{}); err == nil {
		t.Error("List succeeded against a closed port")
	}
	if _, err := s.Stats(ctx, now); err == nil {
		t.Error("Stats succeeded against a closed port")
	}

	g, err := idem.New(s, idem.Options{Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := g.Do(ctx, idem.Message{ID: "m1", Payload: []byte("x")}, func(context.Context) ([]byte, error) {
		t.Fatal("handler ran without a claim")
		return nil, nil
	})
	var se *idem.StoreError
	if !errors.As(err, &se) || idem.Decide(res, err) != idem.ActionRetry {
		t.Fatalf("Do with Redis down = %v, %v (action %v); want a StoreError and retry", res.Outcome, err, idem.Decide(res, err))
	}
}

// TestForeignValue: a key under the prefix that does not hold a record (an
// operator's mistake, another program) is reported as an
// *idem.InvalidDataError (the message would fail the same way on every
// redelivery, so it is dead-lettered rather than retried), and never
// claimed over or deleted.
func TestForeignValue(t *testing.T) { testForeignValue(t, standalone) }

func testForeignValue(t *testing.T, on backend) {
	c := on.client(t)
	s := newStore(t, c)
	ctx := context.Background()
	now := storetest.T0
	for _, setup := range []func(key string) error{
		func(key string) error { return c.Set(ctx, key, "not a record", 0).Err() },
		func(key string) error { return c.HSet(ctx, key, "state", "completed").Err() },
	} {
		k := idem.Key{Scope: "s", ID: "foreign"}
		if err := c.Del(ctx, s.Key(k)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := setup(s.Key(k)); err != nil {
			t.Fatal(err)
		}
		req := idem.ClaimRequest{Key: k, Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
		// Twice: through the claim script, then (GET mode on after the
		// existing key) through SET NX GET and the Go decoder.
		for range 2 {
			if cl, err := s.Claim(ctx, req); !errors.Is(err, idem.ErrInvalidData) || !idem.IsPermanent(err) {
				t.Fatalf("Claim over a foreign value = %v, %v; want ErrInvalidData (permanent)", cl.Outcome, err)
			}
		}
		if _, err := s.ClaimBatch(ctx, []idem.ClaimRequest{req}); !errors.Is(err, idem.ErrInvalidData) {
			t.Fatalf("ClaimBatch over a foreign value = %v, want ErrInvalidData", err)
		}
		if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: 1, Now: now, ExpiresAt: now.Add(time.Hour)}); !errors.Is(err, idem.ErrInvalidData) {
			t.Fatalf("Complete over a foreign value = %v, want ErrInvalidData", err)
		}
		if _, err := s.Get(ctx, k); !errors.Is(err, idem.ErrInvalidData) {
			t.Fatalf("Get of a foreign value = %v, want ErrInvalidData", err)
		}
		if _, err := s.Sweep(ctx, idem.SweepRequest{Now: now.Add(1000 * time.Hour), Limit: 10}); err != nil {
			t.Fatalf("Sweep with a foreign value: %v", err)
		}
		if n, _ := c.Exists(ctx, s.Key(k)).Result(); n != 1 {
			t.Fatal("foreign value was deleted")
		}
	}
}

// TestTokenAfterRedisDeletesRecord: a record expired by the caller's clock
// but still in Redis passes its token on (+1); once Redis has removed it
// (its expiry, eviction, a restart without persistence), the next claim
// starts at the request's fresh random token, so no zombie of an earlier
// lifetime can complete, renew or release over the new owner.
func TestTokenAfterRedisDeletesRecord(t *testing.T) { testTokenAfterRedisDeletesRecord(t, standalone) }

func testTokenAfterRedisDeletesRecord(t *testing.T, on backend) {
	c := on.client(t)
	s := newStore(t, c)
	ctx := context.Background()
	now := storetest.T0
	k := idem.Key{Scope: "s", ID: "t"}
	req := idem.ClaimRequest{Key: k, Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
	first, err := s.Claim(ctx, req)
	if err != nil || first.Record.Token < 1<<32 {
		t.Fatalf("first claim: %+v %v; want a random token of 2^32 or more", first, err)
	}
	if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: first.Record.Token, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err) // settled: only settled records expire
	}
	later := req
	later.Now, later.LeaseUntil, later.ExpiresAt = now.Add(2*time.Hour), now.Add(2*time.Hour+time.Minute), now.Add(3*time.Hour)
	second, err := s.Claim(ctx, later) // expired by the caller's clock, still in Redis
	if err != nil || second.Outcome != idem.ClaimAcquired || second.Record.Token != first.Record.Token+1 {
		t.Fatalf("claim of an expired record: %+v %v; want token %d", second, err, first.Record.Token+1)
	}
	zombies := []int64{first.Record.Token, second.Record.Token}
	for life := range 5 {
		if err := c.Del(ctx, s.Key(k)).Err(); err != nil { // what Redis's expiry or a restart does
			t.Fatal(err)
		}
		next, err := s.Claim(ctx, later)
		if err != nil || next.Outcome != idem.ClaimAcquired {
			t.Fatalf("claim after Redis removed the record: %+v %v", next, err)
		}
		at := later.Now.Add(time.Second)
		for _, z := range zombies {
			if z == next.Record.Token {
				t.Fatalf("lifetime %d: token %d repeats a zombie's", life, z)
			}
			if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: z, Now: at, ExpiresAt: at.Add(time.Hour)}); !errors.Is(err, idem.ErrLeaseLost) {
				t.Fatalf("zombie %d completed over owner %d: %v", z, next.Record.Token, err)
			}
			if err := s.Renew(ctx, idem.RenewRequest{Key: k, Token: z, Now: at, LeaseUntil: at.Add(time.Minute)}); !errors.Is(err, idem.ErrLeaseLost) {
				t.Fatalf("zombie %d renewed: %v", z, err)
			}
			if err := s.Release(ctx, idem.ReleaseRequest{Key: k, Token: z, Now: at}); !errors.Is(err, idem.ErrLeaseLost) {
				t.Fatalf("zombie %d released: %v", z, err)
			}
		}
		zombies = append(zombies, next.Record.Token)
	}
}

func TestConformanceInspector(t *testing.T) { testConformanceInspector(t, standalone) }

func testConformanceInspector(t *testing.T, on backend) {
	c := on.client(t)
	storetest.RunInspector(t, func(t *testing.T) storetest.InspectorStore { return newStore(t, c) })
}
