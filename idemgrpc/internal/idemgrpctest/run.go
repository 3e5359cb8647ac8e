package idemgrpctest

import (
	"strconv"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemgrpc"
	"github.com/idemgo/idem/internal/testenv"
)

// Run runs, as subtests, every behaviour of the server and client
// interceptors that goes through the store, each on a store of its own from
// open: idemgrpc's tests run them on store/memory,
// idemgrpc/internal/integration's on the SQLite store.
func Run(t *testing.T, open func(testing.TB) idem.Store) {
	testenv.RunCases(t, open,
		testenv.Case[idem.Store]{Name: "DuplicateReplaysRecordedReply", Run: duplicateReplaysRecordedReply},
		testenv.Case[idem.Store]{Name: "KeysScopedByPrincipal", Run: keysScopedByPrincipal},
		testenv.Case[idem.Store]{Name: "KeyReusedWithAnotherRequest", Run: keyReusedWithAnotherRequest},
		testenv.Case[idem.Store]{Name: "InProgressAbortsWithRetryInfo", Run: inProgressAbortsWithRetryInfo},
		testenv.Case[idem.Store]{Name: "HandlerErrorReleasesKey", Run: handlerErrorReleasesKey},
		testenv.Case[idem.Store]{Name: "RecordCodesReplayTheError", Run: recordCodesReplayTheError},
		testenv.Case[idem.Store]{Name: "ReplyTooLargeToRecord", Run: replyTooLargeToRecord},
		testenv.Case[idem.Store]{Name: "StaleParkedAwaitsOperator", Run: staleParkedAwaitsOperator},
		testenv.Case[idem.Store]{Name: "ClientKeepsOneKeyAcrossRetries", Run: clientKeepsOneKeyAcrossRetries},
		testenv.Case[idem.Store]{Name: "ClientRetryWaitsForHolder", Run: clientRetryWaitsForHolder},
	)
}

// ServeB serves the test service, behind the interceptor over store unless
// store is nil.
func ServeB(b *testing.B, store idem.Store) *grpc.ClientConn {
	var ics []grpc.UnaryServerInterceptor
	if store != nil {
		ics = append(ics, Interceptor(b, store, idemgrpc.Options{}).UnaryInterceptor())
	}
	return Serve(b, &Payments{}, ics)
}

// Invoke calls Charge as alice over conn in b's loop, with key(i) as the
// i-th call's key (none when key is nil).
func Invoke(b *testing.B, conn *grpc.ClientConn, key func(i int) string) {
	in, _ := structpb.NewStruct(map[string]any{"amount": 10})
	b.ReportAllocs()
	ctx := metadata.AppendToOutgoingContext(b.Context(), "x-user", "alice")
	i := 0
	for b.Loop() {
		c := ctx
		if key != nil {
			c = metadata.AppendToOutgoingContext(ctx, idemgrpc.DefaultMetadataKey, key(i))
		}
		if err := conn.Invoke(c, MethodCharge, in, new(structpb.Struct)); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// Bench measures a Charge over bufconn behind the interceptor on stores
// from open: on new keys (claim, run, record) and replays of one key.
func Bench(b *testing.B, open func(testing.TB) idem.Store) {
	b.Run("new-key", func(b *testing.B) {
		Invoke(b, ServeB(b, open(b)), func(i int) string { return "k" + strconv.Itoa(i) })
	})
	b.Run("replay", func(b *testing.B) {
		Invoke(b, ServeB(b, open(b)), func(int) string { return "same" })
	})
}
