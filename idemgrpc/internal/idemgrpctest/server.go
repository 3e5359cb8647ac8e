package idemgrpctest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemgrpc"
)

func duplicateReplaysRecordedReply(t *testing.T, store idem.Store) {
	svc := &Payments{Header: true}
	conn := Serve(t, svc, []grpc.UnaryServerInterceptor{Interceptor(t, store, idemgrpc.Options{}).UnaryInterceptor()})
	first, h1, _, err := Call(t, conn, MethodCharge, "alice", "k1", 10)
	if err != nil {
		t.Fatal(err)
	}
	if Replayed(h1) || len(h1.Get("x-charge")) != 1 {
		t.Errorf("first reply's header %v: want the handler's own, no replay mark", h1)
	}
	second, h2, t2, err := Call(t, conn, MethodCharge, "alice", "k1", 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := svc.Charges.Load(); got != 1 {
		t.Fatalf("charged %d times, want 1", got)
	}
	if RunOf(first) != 1 || RunOf(second) != 1 || second.GetFields()["user"].GetStringValue() != "alice" {
		t.Errorf("replay = %v, want the first reply %v", second.AsMap(), first.AsMap())
	}
	// Only the reply message is recorded, not the handler's metadata.
	if !Replayed(h2) || !Replayed(t2) || len(h2.Get("x-charge")) != 0 {
		t.Errorf("replay not marked: header %v trailer %v", h2, t2)
	}
}

func keysScopedByPrincipal(t *testing.T, store idem.Store) {
	svc := &Payments{}
	conn := Serve(t, svc, []grpc.UnaryServerInterceptor{Interceptor(t, store, idemgrpc.Options{}).UnaryInterceptor()})
	if _, _, _, err := Call(t, conn, MethodCharge, "alice", "shared", 10); err != nil {
		t.Fatal(err)
	}
	// bob guesses alice's key with the same request: he must get his
	// own charge, never alice's reply.
	reply, h, _, err := Call(t, conn, MethodCharge, "bob", "shared", 10)
	if err != nil {
		t.Fatal(err)
	}
	if Replayed(h) || reply.GetFields()["user"].GetStringValue() != "bob" || RunOf(reply) != 2 {
		t.Errorf("bob got %v (replayed %v), want his own charge", reply.AsMap(), Replayed(h))
	}
	_, _, _, err = Call(t, conn, MethodCharge, "", "shared", 10)
	if status.Code(err) != codes.Unauthenticated || idemgrpc.Reason(err) != idemgrpc.ReasonUnauthenticated {
		t.Errorf("keyed call without a principal: %v, want Unauthenticated", err)
	}
}

func keyReusedWithAnotherRequest(t *testing.T, store idem.Store) {
	svc := &Payments{}
	s := Interceptor(t, store, idemgrpc.Options{Methods: []string{MethodCharge, MethodRefund}})
	conn := Serve(t, svc, []grpc.UnaryServerInterceptor{s.UnaryInterceptor()})
	if _, _, _, err := Call(t, conn, MethodCharge, "alice", "k", 10); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what   string
		method string
		amount float64
	}{{"another message", MethodCharge, 99}, {"another method", MethodRefund, 10}} {
		_, _, _, err := Call(t, conn, c.method, "alice", "k", c.amount)
		if status.Code(err) != codes.FailedPrecondition || idemgrpc.Reason(err) != idemgrpc.ReasonKeyReused {
			t.Errorf("%s: %v, want FailedPrecondition %s", c.what, err, idemgrpc.ReasonKeyReused)
		}
	}
	if svc.Charges.Load() != 1 || svc.Refunds.Load() != 0 {
		t.Errorf("charges %d refunds %d, want 1 and 0", svc.Charges.Load(), svc.Refunds.Load())
	}
}

func inProgressAbortsWithRetryInfo(t *testing.T, store idem.Store) {
	entered, release := make(chan struct{}), make(chan struct{})
	svc := &Payments{Block: func(context.Context) { close(entered); <-release }}
	const lease = 20 * time.Second
	s := Interceptor(t, store, idemgrpc.Options{Guard: idem.Options{Lease: lease}})
	conn := Serve(t, svc, []grpc.UnaryServerInterceptor{s.UnaryInterceptor()})
	done := make(chan error, 1)
	go func() {
		_, _, _, err := Call(t, conn, MethodCharge, "alice", "k", 10)
		done <- err
	}()
	<-entered
	_, _, trailer, err := Call(t, conn, MethodCharge, "alice", "k", 10)
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
	reply, _, _, err := Call(t, conn, MethodCharge, "alice", "k", 10)
	if err != nil || RunOf(reply) != 1 || svc.Charges.Load() != 1 {
		t.Errorf("after the holder finished: %v %v, charges %d; want its reply", reply.AsMap(), err, svc.Charges.Load())
	}
}

func handlerErrorReleasesKey(t *testing.T, store idem.Store) {
	svc := &Payments{Fail: func(n int64) error {
		if n == 1 {
			return status.Error(codes.ResourceExhausted, "card network busy")
		}
		return nil
	}}
	conn := Serve(t, svc, []grpc.UnaryServerInterceptor{Interceptor(t, store, idemgrpc.Options{}).UnaryInterceptor()})
	_, _, _, err := Call(t, conn, MethodCharge, "alice", "k", 10)
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || st.Message() != "card network busy" {
		t.Fatalf("first call: %v, want the handler's status", err)
	}
	reply, h, _, err := Call(t, conn, MethodCharge, "alice", "k", 10)
	if err != nil || Replayed(h) || RunOf(reply) != 2 {
		t.Errorf("retry after a released error: %v %v (replayed %v), want the handler to run again", reply.AsMap(), err, Replayed(h))
	}
}

func recordCodesReplayTheError(t *testing.T, store idem.Store) {
	svc := &Payments{Fail: func(int64) error { return status.Error(codes.InvalidArgument, "card declined") }}
	s := Interceptor(t, store, idemgrpc.Options{RecordCodes: []codes.Code{codes.InvalidArgument}})
	conn := Serve(t, svc, []grpc.UnaryServerInterceptor{s.UnaryInterceptor()})
	_, _, _, first := Call(t, conn, MethodCharge, "alice", "k", 10)
	_, _, trailer, second := Call(t, conn, MethodCharge, "alice", "k", 10)
	for i, err := range []error{first, second} {
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != "card declined" {
			t.Errorf("call %d: %v, want the recorded InvalidArgument", i+1, err)
		}
	}
	if svc.Charges.Load() != 1 || !Replayed(trailer) {
		t.Errorf("charges %d, trailer %v; want 1 and a replay mark", svc.Charges.Load(), trailer)
	}
}

func replyTooLargeToRecord(t *testing.T, store idem.Store) {
	svc := &Payments{}
	// Options.MaxResponseSize bounds the reply; the guard's limit adds
	// room for the record's envelope, so 1 byte leaves the reply out.
	s := Interceptor(t, store, idemgrpc.Options{MaxResponseSize: 1})
	conn := Serve(t, svc, []grpc.UnaryServerInterceptor{s.UnaryInterceptor()})
	first, _, _, err := Call(t, conn, MethodCharge, "alice", "k", 10)
	if err != nil || RunOf(first) != 1 {
		t.Fatalf("first call: %v %v, want its whole reply", first.AsMap(), err)
	}
	_, _, _, err = Call(t, conn, MethodCharge, "alice", "k", 10)
	if status.Code(err) != codes.FailedPrecondition || idemgrpc.Reason(err) != idemgrpc.ReasonNotReplayable {
		t.Errorf("retry of an unrecorded reply: %v, want FailedPrecondition %s", err, idemgrpc.ReasonNotReplayable)
	}
	if svc.Charges.Load() != 1 {
		t.Errorf("charged %d times, want 1: the key is completed without its reply", svc.Charges.Load())
	}
}

func staleParkedAwaitsOperator(t *testing.T, store idem.Store) {
	// A holder that claimed alice's key and died: its lease ended an
	// hour before the guard's clock.
	now := time.Now()
	key := idem.Key{Scope: "payments", ID: "alice|k"} // storedID's (principal, key) form
	if _, err := store.Claim(t.Context(), idem.ClaimRequest{
		Key: key, Now: now, LeaseUntil: now.Add(time.Second), ExpiresAt: now.Add(48 * time.Hour), NewToken: 1,
	}); err != nil {
		t.Fatal(err)
	}
	svc := &Payments{}
	s := Interceptor(t, store, idemgrpc.Options{Guard: idem.Options{
		Stale: idem.StalePark, Clock: func() time.Time { return now.Add(time.Hour) },
	}})
	conn := Serve(t, svc, []grpc.UnaryServerInterceptor{s.UnaryInterceptor()})
	_, _, _, err := Call(t, conn, MethodCharge, "alice", "k", 10)
	if status.Code(err) != codes.FailedPrecondition || idemgrpc.Reason(err) != idemgrpc.ReasonStale {
		t.Errorf("stale record under StalePark: %v, want FailedPrecondition %s", err, idemgrpc.ReasonStale)
	}
	if _, ok := idemgrpc.RetryDelay(err); ok || svc.Charges.Load() != 0 {
		t.Errorf("RetryInfo present %v, charges %d; want neither: an operator decides", ok, svc.Charges.Load())
	}
}
