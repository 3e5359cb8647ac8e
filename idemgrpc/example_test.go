package idemgrpc_test

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemgo/idem/idemgrpc"
	"github.com/idemgo/idem/idemgrpc/internal/idemgrpctest"
	"github.com/idemgo/idem/store/memory"
)

// A Charge method that a client may retry safely: the retry with the same
// key gets the first reply again, and the charge runs once.
// (idemgrpctest.PaymentsDesc is the hand-written grpc.ServiceDesc of this
// module's tests; a real service registers its generated one.)
func ExampleNewServer() {
	ids, err := idemgrpc.NewServer(memory.New(), idemgrpc.Options{ // any idem.Store
		Scope: "payments",
		// The caller's identity, from your authentication interceptor.
		Principal: func(ctx context.Context) (string, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			return append(md.Get("x-user"), "")[0], nil
		},
		Methods: []string{"/idemtest.Payments/Charge"},
	})
	if err != nil {
		panic(err)
	}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ids.UnaryInterceptor()))
	svc := &idemgrpctest.Payments{}
	srv.RegisterService(&idemgrpctest.PaymentsDesc, svc)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()

	ctx := metadata.AppendToOutgoingContext(context.Background(),
		"x-user", "alice", idemgrpc.DefaultMetadataKey, "8e03978e-40d5-43e8-bc93-6894a57f9324")
	in, _ := structpb.NewStruct(map[string]any{"amount": 42})
	for range 2 {
		out := new(structpb.Struct)
		var header metadata.MD
		if err := conn.Invoke(ctx, "/idemtest.Payments/Charge", in, out, grpc.Header(&header)); err != nil {
			panic(err)
		}
		fmt.Printf("charge %v of %v, replayed %v\n", out.AsMap()["run"], out.AsMap()["amount"], header.Get(idemgrpc.MetadataReplayed))
	}
	fmt.Println("charges:", svc.Charges.Load())
	// Output:
	// charge 1 of 42, replayed []
	// charge 1 of 42, replayed [true]
	// charges: 1
}
