package idemgrpc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemgrpc"
	"github.com/idemgo/idem/idemgrpc/internal/idemgrpctest"
	"github.com/idemgo/idem/store/memory"
)

// TestBehaviours runs the interceptors' behaviours that go through the
// store (idemgrpctest.Run: replays, keys scoped by principal, reused keys,
// calls in progress, released and recorded errors, replies too large to
// record, parked stale records, the client's retries) on store/memory;
// idemgrpc/internal/integration runs them on the SQLite store.
func TestBehaviours(t *testing.T) {
	idemgrpctest.Run(t, func(testing.TB) idem.Store { return memory.New() })
}

func TestOptInAndKeyChecks(t *testing.T) {
	svc := &idemgrpctest.Payments{}
	s := idemgrpctest.Interceptor(t, memory.New(), idemgrpc.Options{Required: true})
	conn := idemgrpctest.Serve(t, svc, []grpc.UnaryServerInterceptor{s.UnaryInterceptor()})
	// Refund is not opted in: the key is ignored and each call runs.
	for range 2 {
		if _, _, _, err := idemgrpctest.Call(t, conn, idemgrpctest.MethodRefund, "alice", "k", 10); err != nil {
			t.Fatal(err)
		}
	}
	if svc.Refunds.Load() != 2 {
		t.Errorf("refunds %d, want 2: a method not listed passes through", svc.Refunds.Load())
	}
	_, _, _, err := idemgrpctest.Call(t, conn, idemgrpctest.MethodCharge, "alice", "", 10)
	if status.Code(err) != codes.InvalidArgument || idemgrpc.Reason(err) != idemgrpc.ReasonKeyMissing {
		t.Errorf("Required without a key: %v", err)
	}
	_, _, _, err = idemgrpctest.Call(t, conn, idemgrpctest.MethodCharge, "alice", "has space", 10)
	if status.Code(err) != codes.InvalidArgument || idemgrpc.Reason(err) != idemgrpc.ReasonKeyInvalid {
		t.Errorf("invalid key: %v", err)
	}
	if svc.Charges.Load() != 0 {
		t.Errorf("charges %d, want 0", svc.Charges.Load())
	}
	matched := idemgrpctest.Interceptor(t, memory.New(), idemgrpc.Options{Match: func(m string) bool { return m == idemgrpctest.MethodRefund }})
	conn = idemgrpctest.Serve(t, svc, []grpc.UnaryServerInterceptor{matched.UnaryInterceptor()})
	for range 2 {
		if _, _, _, err := idemgrpctest.Call(t, conn, idemgrpctest.MethodRefund, "alice", "k", 10); err != nil {
			t.Fatal(err)
		}
	}
	if svc.Refunds.Load() != 3 {
		t.Errorf("refunds %d, want 3: a method Match selects is deduplicated", svc.Refunds.Load())
	}
}

func TestOptionsValidated(t *testing.T) {
	store := memory.New()
	for name, opts := range map[string]idemgrpc.Options{
		"no scope":     {Principal: idemgrpctest.UserPrincipal, Methods: []string{idemgrpctest.MethodCharge}},
		"no principal": {Scope: "p", Methods: []string{idemgrpctest.MethodCharge}},
		"no methods":   {Scope: "p", Principal: idemgrpctest.UserPrincipal},
		"reconcile":    {Scope: "p", Principal: idemgrpctest.UserPrincipal, Methods: []string{idemgrpctest.MethodCharge}, Guard: idem.Options{Stale: idem.StaleReconcile}},
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
	svc := &idemgrpctest.Payments{}
	const retryAfter = 3 * time.Second
	s := idemgrpctest.Interceptor(t, downStore{memory.New()}, idemgrpc.Options{RetryAfter: retryAfter})
	conn := idemgrpctest.Serve(t, svc, []grpc.UnaryServerInterceptor{s.UnaryInterceptor()})
	_, _, trailer, err := idemgrpctest.Call(t, conn, idemgrpctest.MethodCharge, "alice", "k", 10)
	if status.Code(err) != codes.Unavailable || idemgrpc.Reason(err) != idemgrpc.ReasonUnavailable {
		t.Fatalf("store down: %v, want Unavailable %s", err, idemgrpc.ReasonUnavailable)
	}
	if d, ok := idemgrpc.RetryDelay(err); !ok || d != retryAfter {
		t.Errorf("RetryInfo %v (present %v), want Options.RetryAfter %v", d, ok, retryAfter)
	}
	if got := trailer.Get("grpc-retry-pushback-ms"); len(got) != 1 || got[0] != "3000" {
		t.Errorf("grpc-retry-pushback-ms = %v, want 3000", got)
	}
	if svc.Charges.Load() != 0 {
		t.Errorf("charged %d times with the store down, want 0", svc.Charges.Load())
	}
}
