package idemgrpc_test

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemgrpc"
)

// retryConfig retries Charge on UNAVAILABLE with gRPC's own retry policy.
const retryConfig = `{"methodConfig": [{
	"name": [{"service": "idemtest.Payments"}],
	"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`

// lossy stands in for a connection that drops the first reply after the
// server applied the call: it lets the first attempt run through the inner
// interceptors and the handler, then answers Unavailable. It records the key
// every attempt carried.
type lossy struct {
	mu   sync.Mutex
	keys []string
}

func (l *lossy) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	l.mu.Lock()
	l.keys = append(l.keys, append(md.Get(idemgrpc.DefaultMetadataKey), "")[0])
	first := len(l.keys) == 1
	l.mu.Unlock()
	reply, err := h(ctx, req)
	if first && err == nil {
		return nil, status.Error(codes.Unavailable, "connection reset after the charge")
	}
	return reply, err
}

func TestClientKeepsOneKeyAcrossRetries(t *testing.T) {
	forStores(t, func(t *testing.T, store idem.Store) {
		for _, withClient := range []bool{true, false} {
			svc, loss := &payments{}, &lossy{}
			dial := []grpc.DialOption{grpc.WithDefaultServiceConfig(retryConfig)}
			if withClient {
				dial = append(dial, grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(idemgrpc.ClientOptions{})))
			}
			srv := interceptor(t, store, idemgrpc.Options{Scope: "retry-" + map[bool]string{true: "client", false: "bare"}[withClient]})
			conn := serve(t, svc, []grpc.UnaryServerInterceptor{loss.intercept, srv.UnaryInterceptor()}, dial...)
			reply, header, _, err := call(t, conn, methodCharge, "alice", "", 10)
			if err != nil {
				t.Fatalf("client interceptor %v: %v", withClient, err)
			}
			if len(loss.keys) != 2 {
				t.Fatalf("client interceptor %v: %d attempts, want 2 (gRPC's retry policy did not retry)", withClient, len(loss.keys))
			}
			if !withClient {
				// Without the interceptor the retry carries no key: the
				// charge runs twice. This is what the interceptor prevents.
				if svc.charges.Load() != 2 {
					t.Errorf("without the client interceptor: charges %d, want 2", svc.charges.Load())
				}
				continue
			}
			if loss.keys[0] == "" || loss.keys[0] != loss.keys[1] {
				t.Errorf("attempts carried keys %q, want one key on both", loss.keys)
			}
			if svc.charges.Load() != 1 || run(reply) != 1 || !replayed(header) {
				t.Errorf("charges %d, reply %v (replayed %v); want one charge and its reply replayed", svc.charges.Load(), reply.AsMap(), replayed(header))
			}
		}
	})
}

func TestClientKeepsCallersKeyAndDerivesInHandlers(t *testing.T) {
	var seen []string
	capture := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		md, _ := metadata.FromOutgoingContext(ctx)
		seen = append(seen, md.Get(idemgrpc.DefaultMetadataKey)...)
		return nil
	}
	ic := idemgrpc.UnaryClientInterceptor(idemgrpc.ClientOptions{Methods: []string{methodCharge}})
	invoke := func(ctx context.Context, method string) {
		if err := ic(ctx, method, nil, nil, nil, capture); err != nil {
			t.Fatal(err)
		}
	}
	invoke(metadata.AppendToOutgoingContext(context.Background(), idemgrpc.DefaultMetadataKey, "mine"), methodCharge)
	msgCtx := idem.ContextWithKey(context.Background(), idem.Key{Scope: "orders", ID: "order-7"})
	invoke(msgCtx, methodCharge)
	invoke(msgCtx, methodCharge)
	invoke(context.Background(), methodRefund) // not listed: no key
	if len(seen) != 3 || seen[0] != "mine" {
		t.Fatalf("keys %q, want the caller's, then two derived", seen)
	}
	if want := idem.DeriveKey(msgCtx, methodCharge); seen[1] != want || seen[2] != want {
		t.Errorf("keys in a handler %q, want idem.DeriveKey's %q on each redelivery", seen[1:], want)
	}
}
