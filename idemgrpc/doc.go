// Package idemgrpc makes unary gRPC methods idempotent with an idem store,
// as idemhttp does for HTTP endpoints: a client that may retry a call sends
// a key in its metadata, and the method runs once per key and caller.
//
// # Server interceptor
//
// NewServer returns the interceptor; chain it after authentication, since
// Options.Principal reads the caller from the context:
//
//	ids, err := idemgrpc.NewServer(store, idemgrpc.Options{
//		Scope:     "payments",
//		Principal: func(ctx context.Context) (string, error) { return auth.UserID(ctx) },
//		Methods:   []string{"/payments.v1.Payments/Charge"}, // or Match: func(m string) bool {...}
//	})
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(authn, ids.UnaryInterceptor()))
//
// Only the methods listed in Methods or selected by Match are deduplicated;
// the others pass through. For those, the key is read from the
// "idempotency-key" metadata (Options.MetadataKey) and:
//
//   - the first call with a key runs the method; its reply is recorded as
//     the marshalled message with its type (a google.protobuf.Any), so a
//     duplicate is answered with the same reply, in the method's reply type,
//     without the method running, and with "idempotent-replayed: true" in
//     its header and trailer (MetadataReplayed);
//   - a call while the first is still running gets codes.Aborted with an
//     errdetails.RetryInfo of the time until the holder's lease ends
//     (idem.RetryAfter), also sent as grpc-retry-pushback-ms, which gRPC's
//     own retry policy honours when ABORTED is in its retryableStatusCodes;
//   - the same key with another request (another method, or a request
//     message whose deterministic marshalling differs) gets
//     codes.FailedPrecondition;
//   - a handler error releases the key, its status returned unchanged, so
//     the client's retry runs the method again; Options.RecordCodes lists
//     codes recorded and replayed like a reply instead (default none);
//   - a store that cannot be reached answers codes.Unavailable with
//     RetryInfo.
//
// Every status the interceptor answers itself carries an errdetails.ErrorInfo
// with Domain "idem" and one of the Reason constants; Reason and RetryDelay
// read them on the client.
//
// # Keys are scoped by caller
//
// The stored key is (Scope, principal + client key), so a client that
// guesses or reuses another client's key never gets that client's reply:
// the call runs as its own. Options.Principal is required; AllowAnonymous
// opts out and says why that is dangerous. A keyed call without a principal
// gets codes.Unauthenticated.
//
// Only the reply message is recorded, not the response header or trailer
// metadata the handler set: a replay carries the replay mark alone.
//
// # Client interceptor
//
// UnaryClientInterceptor gives each call one key for all its attempts:
//
//	conn, err := grpc.NewClient(target,
//		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(idemgrpc.ClientOptions{})),
//		grpc.WithDefaultServiceConfig(`{"methodConfig": [{"name": [{"service": "payments.v1.Payments"}],
//			"retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s",
//			"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE", "ABORTED"]}}]}`))
//
// It keeps a key already in the outgoing metadata, derives one from the idem
// key of the message being processed (idem.DeriveKey, stable across the
// message's redeliveries, as idemhttp.Transport does for HTTP), or makes a
// random one. gRPC's retries re-send the call's metadata, so an attempt whose
// reply was lost after the server applied it is answered from the record.
// (gRPC retries an attempt only when no response header reached the client:
// a handler that sets header metadata and then fails is not retried by the
// policy; the application's retry with the same key still is deduplicated.)
package idemgrpc
