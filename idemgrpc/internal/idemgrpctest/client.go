package idemgrpctest

import (
	"context"
	"sync"
	"testing"
	"time"

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

func clientKeepsOneKeyAcrossRetries(t *testing.T, store idem.Store) {
	for _, withClient := range []bool{true, false} {
		svc, loss := &Payments{}, &lossy{}
		dial := []grpc.DialOption{grpc.WithDefaultServiceConfig(retryConfig)}
		if withClient {
			dial = append(dial, grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(idemgrpc.ClientOptions{})))
		}
		srv := Interceptor(t, store, idemgrpc.Options{Scope: "retry-" + map[bool]string{true: "client", false: "bare"}[withClient]})
		conn := Serve(t, svc, []grpc.UnaryServerInterceptor{loss.intercept, srv.UnaryInterceptor()}, dial...)
		reply, header, _, err := Call(t, conn, MethodCharge, "alice", "", 10)
		if err != nil {
			t.Fatalf("client interceptor %v: %v", withClient, err)
		}
		if len(loss.keys) != 2 {
			t.Fatalf("client interceptor %v: %d attempts, want 2 (gRPC's retry policy did not retry)", withClient, len(loss.keys))
		}
		if !withClient {
			// Without the interceptor the retry carries no key: the
			// charge runs twice. This is what the interceptor prevents.
			if svc.Charges.Load() != 2 {
				t.Errorf("without the client interceptor: charges %d, want 2", svc.Charges.Load())
			}
			continue
		}
		if loss.keys[0] == "" || loss.keys[0] != loss.keys[1] {
			t.Errorf("attempts carried keys %q, want one key on both", loss.keys)
		}
		if svc.Charges.Load() != 1 || RunOf(reply) != 1 || !Replayed(header) {
			t.Errorf("charges %d, reply %v (replayed %v); want one charge and its reply replayed", svc.Charges.Load(), reply.AsMap(), Replayed(header))
		}
	}
}

// abortedRetryConfig retries Charge on ABORTED. How long gRPC waits (the
// server's grpc-retry-pushback-ms) is time, which no test here asserts;
// inProgressAbortsWithRetryInfo checks the value sent, and
// clientRetryWaitsForHolder the end: a caller that met a call in progress
// gets its reply, replayed.
const abortedRetryConfig = `{"methodConfig": [{
	"name": [{"service": "idemtest.Payments"}],
	"retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["ABORTED"]}}]}`

func clientRetryWaitsForHolder(t *testing.T, store idem.Store) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	svc := &Payments{Block: func(context.Context) { close(entered); <-release }}
	var mu sync.Mutex
	attempts := 0
	// watch lets the holder finish once the second caller has been
	// told to wait, so that caller's retry finds the record completed.
	watch := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		reply, err := h(ctx, req)
		if status.Code(err) == codes.Aborted {
			mu.Lock()
			attempts++
			mu.Unlock()
			once.Do(func() { close(release) })
		}
		return reply, err
	}
	s := Interceptor(t, store, idemgrpc.Options{Guard: idem.Options{Lease: time.Second}})
	conn := Serve(t, svc, []grpc.UnaryServerInterceptor{watch, s.UnaryInterceptor()},
		grpc.WithDefaultServiceConfig(abortedRetryConfig))
	done := make(chan error, 1)
	go func() {
		_, _, _, err := Call(t, conn, MethodCharge, "alice", "k", 10)
		done <- err
	}()
	<-entered
	reply, header, _, err := Call(t, conn, MethodCharge, "alice", "k", 10)
	if err != nil {
		t.Fatalf("the waiting caller: %v, want the holder's reply after gRPC's retry", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if attempts == 0 || RunOf(reply) != 1 || !Replayed(header) || svc.Charges.Load() != 1 {
		t.Errorf("aborted attempts %d, reply %v (replayed %v), charges %d; want the holder's reply replayed after a retry",
			attempts, reply.AsMap(), Replayed(header), svc.Charges.Load())
	}
}
