package idemgrpc

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/idemgo/idem"
)

// ClientOptions configure the client interceptor. The zero value keys every
// unary call.
type ClientOptions struct {
	// Methods and Match select the full method names that get a key, as
	// Options.Methods and Options.Match do on the server. Both unset: every
	// unary call.
	Methods []string
	Match   func(fullMethod string) bool

	// MetadataKey is the metadata the key is sent in. Default
	// DefaultMetadataKey.
	MetadataKey string

	// NewKey makes the key of a call whose context carries neither a key
	// in its outgoing metadata nor an idem key. Default: 128 random bits in
	// hex.
	NewKey func() string
}

// UnaryClientInterceptor returns a client interceptor that gives each
// covered call one idempotency key for all its attempts. A key already in
// the outgoing metadata (metadata.AppendToOutgoingContext) is kept; inside
// an idem handler the key is idem.DeriveKey(ctx, fullMethod), stable across
// redeliveries of the message being processed; otherwise NewKey makes one.
//
// The key is set before the invoker runs, and gRPC's retry policy (the
// service config's retryPolicy) re-sends the same metadata on every attempt,
// so an attempt whose reply was lost is answered from the server's record
// instead of running again. A retry loop of the application's own must wrap
// the calls in one context carrying the key (set it with
// metadata.AppendToOutgoingContext before the loop), or each call gets a new
// key.
func UnaryClientInterceptor(opts ClientOptions) grpc.UnaryClientInterceptor {
	mdKey := metadataKey(opts.MetadataKey)
	methods := make(map[string]bool, len(opts.Methods))
	for _, m := range opts.Methods {
		methods[m] = true
	}
	all := len(opts.Methods) == 0 && opts.Match == nil
	newKey := opts.NewKey
	if newKey == nil {
		newKey = randomKey
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		covered := all || methods[method] || opts.Match != nil && opts.Match(method)
		if !covered || hasKey(ctx, mdKey) {
			return invoker(ctx, method, req, reply, cc, callOpts...)
		}
		key := idem.DeriveKey(ctx, method)
		if key == "" {
			key = newKey()
		}
		ctx = metadata.AppendToOutgoingContext(ctx, mdKey, key)
		return invoker(ctx, method, req, reply, cc, callOpts...)
	}
}

func hasKey(ctx context.Context, mdKey string) bool {
	md, _ := metadata.FromOutgoingContext(ctx)
	return len(md.Get(mdKey)) > 0
}

func randomKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
