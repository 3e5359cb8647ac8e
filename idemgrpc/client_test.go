package idemgrpc_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemgrpc"
	"github.com/idemgo/idem/idemgrpc/internal/idemgrpctest"
)

func TestClientKeepsCallersKeyAndDerivesInHandlers(t *testing.T) {
	var seen []string
	capture := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		md, _ := metadata.FromOutgoingContext(ctx)
		seen = append(seen, md.Get(idemgrpc.DefaultMetadataKey)...)
		return nil
	}
	ic := idemgrpc.UnaryClientInterceptor(idemgrpc.ClientOptions{Methods: []string{idemgrpctest.MethodCharge}})
	invoke := func(ctx context.Context, method string) {
		if err := ic(ctx, method, nil, nil, nil, capture); err != nil {
			t.Fatal(err)
		}
	}
	invoke(metadata.AppendToOutgoingContext(context.Background(), idemgrpc.DefaultMetadataKey, "mine"), idemgrpctest.MethodCharge)
	msgCtx := idem.ContextWithKey(context.Background(), idem.Key{Scope: "orders", ID: "order-7"})
	invoke(msgCtx, idemgrpctest.MethodCharge)
	invoke(msgCtx, idemgrpctest.MethodCharge)
	invoke(context.Background(), idemgrpctest.MethodRefund) // not listed: no key
	if len(seen) != 3 || seen[0] != "mine" {
		t.Fatalf("keys %q, want the caller's, then two derived", seen)
	}
	if want := idem.DeriveKey(msgCtx, idemgrpctest.MethodCharge); seen[1] != want || seen[2] != want {
		t.Errorf("keys in a handler %q, want idem.DeriveKey's %q on each redelivery", seen[1:], want)
	}
}
