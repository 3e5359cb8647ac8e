package idemgrpc_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemgrpc"
)

func TestDuplicateReplaysRecordedReply(t *testing.T) {
	forStores(t, func(t *testing.T, store idem.Store) {
		svc := &payments{header: true}
		conn := serve(t, svc, []grpc.UnaryServerInterceptor{interceptor(t, store, idemgrpc.Options{}).UnaryInterceptor()})
		first, h1, _, err := call(t, conn, methodCharge, "alice", "k1", 10)
		if err != nil {
			t.Fatal(err)
		}
		if replayed(h1) || len(h1.Get("x-charge")) != 1 {
			t.Errorf("first reply's header %v: want the handler's own, no replay mark", h1)
		}
		second, h2, t2, err := call(t, conn, methodCharge, "alice", "k1", 10)
		if err != nil {
			t.Fatal(err)
		}
		if got := svc.charges.Load(); got != 1 {
			t.Fatalf("charged %d times, want 1", got)
		}
		if run(first) != 1 || run(second) != 1 || second.GetFields()["user"].GetStringValue() != "alice" {
			t.Errorf("replay = %v, want the first reply %v", second.AsMap(), first.AsMap())
		}
		// Only the reply message is recorded, not the handler's metadata.
		if !replayed(h2) || !replayed(t2) || len(h2.Get("x-charge")) != 0 {
			t.Errorf("replay not marked: header %v trailer %v", h2, t2)
		}
	})
}

func TestKeysScopedByPrincipal(t *testing.T) {
	forStores(t, func(t *testing.T, store idem.Store) {
		svc := &payments{}
		conn := serve(t, svc, []grpc.UnaryServerInterceptor{interceptor(t, store, idemgrpc.Options{}).UnaryInterceptor()})
		if _, _, _, err := call(t, conn, methodCharge, "alice", "shared", 10); err != nil {
			t.Fatal(err)
		}
		// bob guesses alice's key with the same request: he must get his
		// own charge, never alice's reply.
		reply, h, _, err := call(t, conn, methodCharge, "bob", "shared", 10)
		if err != nil {
			t.Fatal(err)
		}
		if replayed(h) || reply.GetFields()["user"].GetStringValue() != "bob" || run(reply) != 2 {
			t.Errorf("bob got %v (replayed %v), want his own charge", reply.AsMap(), replayed(h))
		}
		_, _, _, err = call(t, conn, methodCharge, "", "shared", 10)
		if status.Code(err) != codes.Unauthenticated || idemgrpc.Reason(err) != idemgrpc.ReasonUnauthenticated {
			t.Errorf("keyed call without a principal: %v, want Unauthenticated", err)
		}
	})
}

func TestKeyReusedWithAnotherRequest(t *testing.T) {
	forStores(t, func(t *testing.T, store idem.Store) {
		svc := &payments{}
		s := interceptor(t, store, idemgrpc.Options{Methods: []string{methodCharge, methodRefund}})
		conn := serve(t, svc, []grpc.UnaryServerInterceptor{s.UnaryInterceptor()})
		if _, _, _, err := call(t, conn, methodCharge, "alice", "k", 10); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			what   string
			method string
			amount float64
		}{{"another message", methodCharge, 99}, {"another method", methodRefund, 10}} {
			_, _, _, err := call(t, conn, c.method, "alice", "k", c.amount)
			if status.Code(err) != codes.FailedPrecondition || idemgrpc.Reason(err) != idemgrpc.ReasonKeyReused {
				t.Errorf("%s: %v, want FailedPrecondition %s", c.what, err, idemgrpc.ReasonKeyReused)
			}
		}
		if svc.charges.Load() != 1 || svc.refunds.Load() != 0 {
			t.Errorf("charges %d refunds %d, want 1 and 0", svc.charges.Load(), svc.refunds.Load())
		}
	})
}

func TestInProgressAbortsWithRetryInfo(t *testing.T) {
	forStores(t, func(t *testing.T, store idem.Store) {
		entered, release := make(chan struct{}), make(chan struct{})
		svc := &payments{block: func(context.Context) { close(entered); <-release }}
		const lease = 20 * time.Second
		s := interceptor(t, store, idemgrpc.Options{Guard: idem.Options{Lease: lease}})
		conn := serve(t, svc, []grpc.UnaryServerInterceptor{s.UnaryInterceptor()})
		done := make(chan error, 1)
		go func() {
			_, _, _, err := call(t, conn, methodCharge, "alice", "k", 10)
			done <- err
		}()
		<-entered
		_, _, trailer, err := call(t, conn, methodCharge, "alice", "k", 10)
		if status.Code(err) != codes.Aborted || idemgrpc.Reason(err) != idemgrpc.ReasonInProgress {
			t.Fatalf("while in progress: %v, want Aborted %s", err, idemgrpc.ReasonInProgress)
		}
		d, ok := idemgrpc.RetryDelay(err)
		// idem.RetryAfter: the time left on the holder's lease, plus 10ms and
		// at most a second of jitter.
		if !ok || d <= 0 || d > lease+time.Second+10*time.Millisecond {
			t.Errorf("RetryInfo delay %v (present %v), want the lease's remaining time, at most %v", d, ok, lease)
		}
		if got := trailer.Get("grpc-retry-pushback-ms"); len(got) != 1 || got[0] != strconv.FormatInt(d.Milliseconds(), 10) {
			t.Errorf("grpc-retry-pushback-ms = %v, want %d", got, d.Milliseconds())
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		reply, _, _, err := call(t, conn, methodCharge, "alice", "k", 10)
		if err != nil || run(reply) != 1 || svc.charges.Load() != 1 {
			t.Errorf("after the holder finished: %v %v, charges %d; want its reply", reply.AsMap(), err, svc.charges.Load())
		}
	})
}

func TestHandlerErrorReleasesKey(t *testing.T) {
	forStores(t, func(t *testing.T, store idem.Store) {
		svc := &payments{fail: func(n int64) error {
			if n == 1 {
				return status.Error(codes.ResourceExhausted, "card network busy")
			}
			return nil
		}}
		conn := serve(t, svc, []grpc.UnaryServerInterceptor{interceptor(t, store, idemgrpc.Options{}).UnaryInterceptor()})
		_, _, _, err := call(t, conn, methodCharge, "alice", "k", 10)
		if st := status.Convert(err); st.Code() != codes.ResourceExhausted || st.Message() != "card network busy" {
			t.Fatalf("first call: %v, want the handler's status", err)
		}
		reply, h, _, err := call(t, conn, methodCharge, "alice", "k", 10)
		if err != nil || replayed(h) || run(reply) != 2 {
			t.Errorf("retry after a released error: %v %v (replayed %v), want the handler to run again", reply.AsMap(), err, replayed(h))
		}
	})
}

func TestRecordCodesReplayTheError(t *testing.T) {
	forStores(t, func(t *testing.T, store idem.Store) {
		svc := &payments{fail: func(int64) error { return status.Error(codes.InvalidArgument, "card declined") }}
		s := interceptor(t, store, idemgrpc.Options{RecordCodes: []codes.Code{codes.InvalidArgument}})
		conn := serve(t, svc, []grpc.UnaryServerInterceptor{s.UnaryInterceptor()})
		_, _, _, first := call(t, conn, methodCharge, "alice", "k", 10)
		_, _, trailer, second := call(t, conn, methodCharge, "alice", "k", 10)
		for i, err := range []error{first, second} {
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != "card declined" {
				t.Errorf("call %d: %v, want the recorded InvalidArgument", i+1, err)
			}
		}
		if svc.charges.Load() != 1 || !replayed(trailer) {
			t.Errorf("charges %d, trailer %v; want 1 and a replay mark", svc.charges.Load(), trailer)
		}
	})
}

func TestOptInAndKeyChecks(t *testing.T) {
	svc := &payments{}
	s := interceptor(t, stores[0].open(t), idemgrpc.Options{Required: true})
	conn := serve(t, svc, []grpc.UnaryServerInterceptor{s.UnaryInterceptor()})
	// Refund is not opted in: the key is ignored and each call runs.
	for range 2 {
		if _, _, _, err := call(t, conn, methodRefund, "alice", "k", 10); err != nil {
			t.Fatal(err)
		}
	}
	if svc.refunds.Load() != 2 {
		t.Errorf("refunds %d, want 2: a method not listed passes through", svc.refunds.Load())
	}
	_, _, _, err := call(t, conn, methodCharge, "alice", "", 10)
	if status.Code(err) != codes.InvalidArgument || idemgrpc.Reason(err) != idemgrpc.ReasonKeyMissing {
		t.Errorf("Required without a key: %v", err)
	}
	_, _, _, err = call(t, conn, methodCharge, "alice", "has space", 10)
	if status.Code(err) != codes.InvalidArgument || idemgrpc.Reason(err) != idemgrpc.ReasonKeyInvalid {
		t.Errorf("invalid key: %v", err)
	}
	if svc.charges.Load() != 0 {
		t.Errorf("charges %d, want 0", svc.charges.Load())
	}
	matched := interceptor(t, stores[0].open(t), idemgrpc.Options{Match: func(m string) bool { return m == methodRefund }})
	conn = serve(t, svc, []grpc.UnaryServerInterceptor{matched.UnaryInterceptor()})
	for range 2 {
		if _, _, _, err := call(t, conn, methodRefund, "alice", "k", 10); err != nil {
			t.Fatal(err)
		}
	}
	if svc.refunds.Load() != 3 {
		t.Errorf("refunds %d, want 3: a method Match selects is deduplicated", svc.refunds.Load())
	}
}

func TestOptionsValidated(t *testing.T) {
	store := stores[0].open(t)
	for name, opts := range map[string]idemgrpc.Options{
		"no scope":     {Principal: userPrincipal, Methods: []string{methodCharge}},
		"no principal": {Scope: "p", Methods: []string{methodCharge}},
		"no methods":   {Scope: "p", Principal: userPrincipal},
		"reconcile":    {Scope: "p", Principal: userPrincipal, Methods: []string{methodCharge}, Guard: idem.Options{Stale: idem.StaleReconcile}},
	} {
		if _, err := idemgrpc.NewServer(store, opts); !errors.Is(err, idem.ErrInvalidOptions) {
			t.Errorf("%s: %v, want ErrInvalidOptions", name, err)
		}
	}
}

// downStore is a store whose every claim fails, as an unreachable one's.
type downStore struct{ idem.Store }

func (downStore) Claim(context.Context, idem.ClaimRequest) (idem.Claim, error) {
	return idem.Claim{}, errors.New("connection refused")
}

func TestStoreDownAnswersUnavailable(t *testing.T) {
	svc := &payments{}
	const retryAfter = 3 * time.Second
	s := interceptor(t, downStore{stores[0].open(t)}, idemgrpc.Options{RetryAfter: retryAfter})
	conn := serve(t, svc, []grpc.UnaryServerInterceptor{s.UnaryInterceptor()})
	_, _, trailer, err := call(t, conn, methodCharge, "alice", "k", 10)
	if status.Code(err) != codes.Unavailable || idemgrpc.Reason(err) != idemgrpc.ReasonUnavailable {
		t.Fatalf("store down: %v, want Unavailable %s", err, idemgrpc.ReasonUnavailable)
	}
	if d, ok := idemgrpc.RetryDelay(err); !ok || d != retryAfter {
		t.Errorf("RetryInfo %v (present %v), want Options.RetryAfter %v", d, ok, retryAfter)
	}
	if got := trailer.Get("grpc-retry-pushback-ms"); len(got) != 1 || got[0] != "3000" {
		t.Errorf("grpc-retry-pushback-ms = %v, want 3000", got)
	}
	if svc.charges.Load() != 0 {
		t.Errorf("charged %d times with the store down, want 0", svc.charges.Load())
	}
}

func TestReplyTooLargeToRecord(t *testing.T) {
	forStores(t, func(t *testing.T, store idem.Store) {
		svc := &payments{}
		// Options.MaxResponseSize bounds the reply; the guard's limit adds
		// room for the record's envelope, so 1 byte leaves the reply out.
		s := interceptor(t, store, idemgrpc.Options{MaxResponseSize: 1})
		conn := serve(t, svc, []grpc.UnaryServerInterceptor{s.UnaryInterceptor()})
		first, _, _, err := call(t, conn, methodCharge, "alice", "k", 10)
		if err != nil || run(first) != 1 {
			t.Fatalf("first call: %v %v, want its whole reply", first.AsMap(), err)
		}
		_, _, _, err = call(t, conn, methodCharge, "alice", "k", 10)
		if status.Code(err) != codes.FailedPrecondition || idemgrpc.Reason(err) != idemgrpc.ReasonNotReplayable {
			t.Errorf("retry of an unrecorded reply: %v, want FailedPrecondition %s", err, idemgrpc.ReasonNotReplayable)
		}
		if svc.charges.Load() != 1 {
			t.Errorf("charged %d times, want 1: the key is completed without its reply", svc.charges.Load())
		}
	})
}

func TestStaleParkedAwaitsOperator(t *testing.T) {
	forStores(t, func(t *testing.T, store idem.Store) {
		// A holder that claimed alice's key and died: its lease ended an
		// hour before the guard's clock.
		now := time.Now()
		key := idem.Key{Scope: "payments", ID: "alice|k"} // storedID's (principal, key) form
		if _, err := store.Claim(t.Context(), idem.ClaimRequest{
			Key: key, Now: now, LeaseUntil: now.Add(time.Second), ExpiresAt: now.Add(48 * time.Hour), NewToken: 1,
		}); err != nil {
			t.Fatal(err)
		}
		svc := &payments{}
		s := interceptor(t, store, idemgrpc.Options{Guard: idem.Options{
			Stale: idem.StalePark, Clock: func() time.Time { return now.Add(time.Hour) },
		}})
		conn := serve(t, svc, []grpc.UnaryServerInterceptor{s.UnaryInterceptor()})
		_, _, _, err := call(t, conn, methodCharge, "alice", "k", 10)
		if status.Code(err) != codes.FailedPrecondition || idemgrpc.Reason(err) != idemgrpc.ReasonStale {
			t.Errorf("stale record under StalePark: %v, want FailedPrecondition %s", err, idemgrpc.ReasonStale)
		}
		if _, ok := idemgrpc.RetryDelay(err); ok || svc.charges.Load() != 0 {
			t.Errorf("RetryInfo present %v, charges %d; want neither: an operator decides", ok, svc.charges.Load())
		}
	})
}
