package idemgrpc_test

import (
	"strconv"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemgrpc"
)

// serveB serves the test service, behind the interceptor over store unless
// store is nil.
func serveB(b *testing.B, store idem.Store) *grpc.ClientConn {
	var ics []grpc.UnaryServerInterceptor
	if store != nil {
		ics = append(ics, interceptor(b, store, idemgrpc.Options{}).UnaryInterceptor())
	}
	return serve(b, &payments{}, ics)
}

// BenchmarkUnary measures a Charge over bufconn: without the interceptor,
// with it on new keys (claim, run, record), and replays of one key, on each
// store.
func BenchmarkUnary(b *testing.B) {
	in, _ := structpb.NewStruct(map[string]any{"amount": 10})
	invoke := func(b *testing.B, conn *grpc.ClientConn, key func(i int) string) {
		b.ReportAllocs()
		ctx := metadata.AppendToOutgoingContext(b.Context(), "x-user", "alice")
		i := 0
		for b.Loop() {
			c := ctx
			if key != nil {
				c = metadata.AppendToOutgoingContext(ctx, idemgrpc.DefaultMetadataKey, key(i))
			}
			if err := conn.Invoke(c, methodCharge, in, new(structpb.Struct)); err != nil {
				b.Fatal(err)
			}
			i++
		}
	}
	b.Run("bare", func(b *testing.B) {
		invoke(b, serveB(b, nil), nil)
	})
	for _, s := range stores {
		b.Run(s.name+"/new-key", func(b *testing.B) {
			invoke(b, serveB(b, s.open(b)), func(i int) string { return "k" + strconv.Itoa(i) })
		})
		b.Run(s.name+"/replay", func(b *testing.B) {
			invoke(b, serveB(b, s.open(b)), func(int) string { return "same" })
		})
	}
}
