package redisidem

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

// replyErr is an error reply as go-redis returns it (a redis.Error).
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// TestDataErrorsArePermanent: replies Redis gives because of the data
// become *idem.InvalidDataError; failures of the server or the network stay
// retryable, including the ones Redis raises inside a script for its own
// state.
func TestDataErrorsArePermanent(t *testing.T) {
	for _, c := range []struct {
		err  error
		data bool
	}{
		{replyErr("idem: malformed record at idem:{s:k}"), true},
		{replyErr("idem: token 9007199254740991 is too large to count on (2^53 or more) script: 1f0e, on @user_script:40."), true},
		{replyErr("WRONGTYPE Operation against a key holding the wrong kind of value script: 1f0e, on @user_script:70."), true},
		{replyErr("ERR user_script:1: attempt to perform arithmetic on a nil value script: e8f6, on @user_script:1."), true},
		{replyErr("ERR invalid expire time in 'set' command script: 1f0e, on @user_script:40."), true},
		{replyErr("ERR value is not an integer or out of range"), true},
		{errMalformed, true},
		{replyErr("OOM command not allowed when used memory > 'maxmemory'. script: 1f0e, on @user_script:40."), false},
		{replyErr("READONLY You can't write against a read only replica. script: 1f0e, on @user_script:40."), false},
		{replyErr("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), false},
		{replyErr("LOADING Redis is loading the dataset in memory"), false},
		{replyErr("MOVED 3999 127.0.0.1:6381"), false},
		{replyErr("CLUSTERDOWN The cluster is down"), false},
		{replyErr("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), false},
		{replyErr("NOSCRIPT No matching script. Please use EVAL."), false},
		{replyErr("ERR max number of clients reached"), false},
		{replyErr("ERR syntax error"), false},
		{io.EOF, false},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, false},
		{context.DeadlineExceeded, false},
	} {
		err := wrap("claim", c.err)
		if got := errors.Is(err, idem.ErrInvalidData); got != c.data {
			t.Errorf("%q: invalid data %v, want %v", c.err, got, c.data)
		}
		if !errors.Is(err, c.err) {
			t.Errorf("%q: wrapped error %v no longer matches the driver's", c.err, err)
		}
		var ide *idem.InvalidDataError
		if c.data && (!errors.As(err, &ide) || ide.Op != "claim") {
			t.Errorf("%q: %#v, want an *idem.InvalidDataError for op claim", c.err, err)
		}
	}
}

// TestRequestsOutOfRange: times and tokens the scripts cannot count exactly,
// and a release without its time, are refused as invalid data before
// anything reaches Redis.
func TestRequestsOutOfRange(t *testing.T) {
	s := internalStore(t)
	ctx := context.Background()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	far := time.UnixMilli(maxExact).Add(time.Millisecond)
	k := idem.Key{Scope: "range", ID: "k"}
	ok := idem.ClaimRequest{Key: k, Now: now, LeaseUntil: now.Add(time.Second), ExpiresAt: now.Add(time.Hour)}
	for name, mut := range map[string]func(*idem.ClaimRequest){
		"NewToken 2^53": func(r *idem.ClaimRequest) { r.NewToken = 1 << 53 },
		"NewToken < 0":  func(r *idem.ClaimRequest) { r.NewToken = -5 },
		"far ExpiresAt": func(r *idem.ClaimRequest) { r.ExpiresAt = far },
		"far LeaseUntil": func(r *idem.ClaimRequest) {
			r.LeaseUntil = far
		},
		"Now before -2^53 ms": func(r *idem.ClaimRequest) { r.Now = time.UnixMilli(-maxExact).Add(-time.Millisecond) },
	} {
		req := ok
		mut(&req)
		if _, err := s.Claim(ctx, req); !errors.Is(err, idem.ErrInvalidData) {
			t.Errorf("Claim with %s: %v, want ErrInvalidData", name, err)
		}
		if _, err := s.ClaimBatch(ctx, []idem.ClaimRequest{ok, req}); !errors.Is(err, idem.ErrInvalidData) {
			t.Errorf("ClaimBatch with %s: %v, want ErrInvalidData", name, err)
		}
	}
	if _, err := s.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("a refused batch wrote its valid request too: %v", err)
	}
	c, err := s.Claim(ctx, ok)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: c.Record.Token, Now: now, ExpiresAt: far}); !errors.Is(err, idem.ErrInvalidData) {
		t.Errorf("Complete with a far ExpiresAt: %v", err)
	}
	if err := s.Renew(ctx, idem.RenewRequest{Key: k, Token: c.Record.Token, Now: now, LeaseUntil: far}); !errors.Is(err, idem.ErrInvalidData) {
		t.Errorf("Renew with a far LeaseUntil: %v", err)
	}
	if err := s.Release(ctx, idem.ReleaseRequest{Key: k, Token: c.Record.Token}); !errors.Is(err, idem.ErrInvalidData) {
		t.Errorf("Release with a zero Now: %v", err)
	}
	if r, err := s.Get(ctx, k); err != nil || r.State != idem.StateInProgress || !r.ExpiresAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("refused requests changed the record: %+v, %v", r, err)
	}
}
