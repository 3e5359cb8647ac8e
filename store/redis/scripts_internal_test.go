package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testenv"
)

func internalStore(t *testing.T) *Store {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: testenv.Redis.Need(t)})
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "idemtest:int:" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := c.Keys(ctx, prefix+":*").Result() // a handful of keys in a test
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
		c.Close()
	})
	s, err := New(c, Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPipelineLoadsMissingScript: a script Redis has never seen (as after a
// restart or failover) fails EVALSHA with NOSCRIPT inside a pipeline; the
// store sends exactly those calls again as EVAL, and each runs once.
func TestPipelineLoadsMissingScript(t *testing.T) {
	s := internalStore(t)
	ctx := context.Background()
	var b [8]byte
	_, _ = rand.Read(b[:])
	// A unique comment gives a SHA no server has cached.
	fresh := goredis.NewScript("-- " + hex.EncodeToString(b[:]) + "\nreturn redis.call('INCR', KEYS[1])")
	calls := make([]scriptCall, 5)
	for i := range calls {
		calls[i] = scriptCall{key: s.prefix + ":counter"}
	}
	cmds, err := s.evalPipelined(ctx, fresh, calls)
	if err != nil {
		t.Fatalf("evalPipelined: %v", err)
	}
	for i, c := range cmds {
		if v, err := c.Int64(); err != nil || v != int64(i+1) {
			t.Fatalf("call %d = %v, %v; want %d", i, v, err, i+1)
		}
	}
	// Each call ran exactly once.
	if n, _ := s.client.Get(ctx, s.prefix+":counter").Int64(); n != 5 {
		t.Fatalf("counter = %d, want 5", n)
	}
}

// TestRedisExpiryFollowsRetention: the key's Redis expiry is the record's
// ExpiresAt at claim and moves to the new retention end on completion; the
// lease is a field, not the key's TTL.
func TestRedisExpiryFollowsRetention(t *testing.T) {
	s := internalStore(t)
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	k := idem.Key{Scope: "ttl", ID: "t1"}
	c, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Now: now, LeaseUntil: now.Add(time.Second), ExpiresAt: now.Add(time.Hour)})
	if err != nil || c.Outcome != idem.ClaimAcquired {
		t.Fatalf("claim: %v %v", c.Outcome, err)
	}
	at, err := s.client.PExpireTime(ctx, keyOf(s.prefix, k)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := now.Add(time.Hour).UnixMilli(); at.Milliseconds() != want {
		t.Fatalf("PEXPIRETIME after claim = %d, want %d (ExpiresAt, not the lease)", at.Milliseconds(), want)
	}
	if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: c.Record.Token, Now: now, ExpiresAt: now.Add(48 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	at, _ = s.client.PExpireTime(ctx, keyOf(s.prefix, k)).Result()
	if want := now.Add(48 * time.Hour).UnixMilli(); at.Milliseconds() != want {
		t.Fatalf("PEXPIRETIME after complete = %d, want %d", at.Milliseconds(), want)
	}
}
