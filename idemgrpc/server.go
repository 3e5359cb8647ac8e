package idemgrpc

import (
	"context"
	"errors"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemgo/idem"
)

// ErrorDomain is the Domain of the errdetails.ErrorInfo attached to every
// status the interceptor answers itself; its Reason is one of the Reason
// constants, so a client can tell them from its handler's errors.
const ErrorDomain = "idem"

// Reasons in the ErrorInfo of the interceptor's own statuses.
const (
	ReasonKeyMissing      = "IDEMPOTENCY_KEY_MISSING"        // InvalidArgument: Required and no key
	ReasonKeyInvalid      = "IDEMPOTENCY_KEY_INVALID"        // InvalidArgument: several keys, or one ValidateKey refuses
	ReasonUnauthenticated = "IDEMPOTENCY_NO_PRINCIPAL"       // Unauthenticated: a keyed call without a principal
	ReasonInProgress      = "IDEMPOTENCY_KEY_IN_PROGRESS"    // Aborted, with RetryInfo: a call with this key is running
	ReasonKeyReused       = "IDEMPOTENCY_KEY_REUSED"         // FailedPrecondition: the key was used with another request
	ReasonStale           = "IDEMPOTENCY_KEY_STALE"          // FailedPrecondition: an earlier call stopped midway and awaits an operator (StalePark)
	ReasonNotReplayable   = "IDEMPOTENCY_REPLY_NOT_RECORDED" // FailedPrecondition: done, but the reply was too large to record
	ReasonUnavailable     = "IDEMPOTENCY_STORE_UNAVAILABLE"  // Unavailable, with RetryInfo: the store could not be reached
)

// Server is the idempotency interceptor of a gRPC server. It is safe for
// concurrent use.
type Server struct {
	cfg   *config
	guard *idem.Guard
}

// NewServer returns the interceptor over store. Options are validated once
// here; the error wraps idem.ErrInvalidOptions and says what to fix.
func NewServer(store idem.Store, opts Options) (*Server, error) {
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	g, err := idem.New(store, cfg.guardOptions())
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, guard: g}, nil
}

// Guard returns the guard that records the replies (its store, its options
// with defaults filled in).
func (s *Server) Guard() *idem.Guard { return s.guard }

// UnaryInterceptor returns the unary server interceptor, for
// grpc.ChainUnaryInterceptor after the authentication interceptor that
// Principal reads.
func (s *Server) UnaryInterceptor() grpc.UnaryServerInterceptor { return s.intercept }

func (s *Server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	c := s.cfg
	if !c.covers(info.FullMethod) {
		return handler(ctx, req)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	values := md.Get(c.MetadataKey)
	switch {
	case len(values) == 0 && c.Required:
		return nil, refuse(codes.InvalidArgument, ReasonKeyMissing, info.FullMethod+" needs an "+c.MetadataKey+" metadata entry", 0)
	case len(values) == 0:
		return handler(ctx, req)
	case len(values) > 1:
		return nil, refuse(codes.InvalidArgument, ReasonKeyInvalid, "send exactly one "+c.MetadataKey+" metadata entry", 0)
	}
	clientKey := values[0]
	err := CheckKey(clientKey)
	if err == nil && c.ValidateKey != nil {
		err = c.ValidateKey(clientKey)
	}
	if err != nil {
		return nil, refuse(codes.InvalidArgument, ReasonKeyInvalid, c.MetadataKey+": "+keyDetail(err), 0)
	}
	principal, err := s.principal(ctx)
	if err != nil {
		return nil, err
	}
	reqMsg, ok := req.(proto.Message)
	if !ok {
		return nil, status.Error(codes.Internal, errNotProto.Error())
	}
	body, err := marshal.Marshal(reqMsg)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: marshal the request: %v", err)
	}
	key := idem.Key{Scope: c.Scope, ID: storedID(principal, clientKey)}
	// The method is part of the fingerprint, so one key sent to two methods
	// is a reuse, as one key sent to two paths is over HTTP.
	fp := idem.Fingerprint([]byte(info.FullMethod), body)

	var (
		ran     bool
		reply   any
		callErr error
	)
	res, err := s.guard.DoKey(ctx, key, fp, func(ctx context.Context) ([]byte, error) {
		ran = true
		reply, callErr = handler(ctx, req)
		if callErr != nil {
			st := status.Convert(callErr)
			if c.record[st.Code()] {
				return encodeStatus(st)
			}
			return nil, callErr // released: the retry runs the handler again
		}
		if m, ok := reply.(proto.Message); ok && proto.Size(m) > c.MaxResponseSize {
			// Done, but too large to record: the key is completed without a
			// reply, so a retry is told so instead of charging again.
			return nil, nil
		}
		return encodeReply(reply)
	})
	if ran {
		// The caller gets the handler's own answer. A release, a lost lease
		// or a failed completion leave the key retryable; the guard's
		// Observer reports them.
		return reply, callErr
	}
	switch {
	case err == nil: // a duplicate: the handler ran for an earlier call
		return s.replay(ctx, res)
	case errors.Is(err, idem.ErrConflict):
		return nil, refuse(codes.FailedPrecondition, ReasonKeyReused,
			"this idempotency key was used before with a different request (method or message)", 0)
	case errors.Is(err, idem.ErrInProgress):
		return nil, retryLater(ctx, codes.Aborted, ReasonInProgress,
			"a call with this idempotency key is being processed; retry later with the same key",
			idem.RetryAfter(res, err, time.Now(), c.RetryAfter))
	case errors.Is(err, idem.ErrStale):
		return nil, refuse(codes.FailedPrecondition, ReasonStale,
			"an earlier call with this idempotency key stopped before finishing and awaits an operator", 0)
	case errors.Is(err, idem.ErrNoKey), errors.Is(err, idem.ErrInvalidKey):
		return nil, refuse(codes.InvalidArgument, ReasonKeyInvalid, keyDetail(err), 0)
	default:
		return nil, retryLater(ctx, codes.Unavailable, ReasonUnavailable,
			"the idempotency store could not be reached; retry later with the same key", c.RetryAfter)
	}
}

func (s *Server) principal(ctx context.Context) (string, error) {
	if s.cfg.Principal == nil {
		return "", nil // AllowAnonymous
	}
	p, err := s.cfg.Principal(ctx)
	if err == nil && p == "" && !s.cfg.AllowAnonymous {
		err = errors.New("no principal")
	}
	if err != nil {
		return "", refuse(codes.Unauthenticated, ReasonUnauthenticated, "calls with an idempotency key need an authenticated caller", 0)
	}
	return p, nil
}

// replay answers a duplicate from its record, marked as a replay in the
// header and the trailer (a recorded error has only trailers on the wire).
func (s *Server) replay(ctx context.Context, res idem.Result) (any, error) {
	mark := metadata.Pairs(MetadataReplayed, "true")
	_ = grpc.SetHeader(ctx, mark)
	_ = grpc.SetTrailer(ctx, mark)
	if len(res.Value) == 0 {
		return nil, refuse(codes.FailedPrecondition, ReasonNotReplayable,
			"the call with this idempotency key was processed, but its reply was too large to record; do not retry it with a new key", 0)
	}
	reply, recorded, err := decode(res.Value)
	if err != nil {
		return nil, refuse(codes.FailedPrecondition, ReasonNotReplayable,
			"the call with this idempotency key was processed, but its recorded reply cannot be read: "+err.Error(), 0)
	}
	return reply, recorded
}

// retryLater is refuse with a RetryInfo of delay and the same delay in the
// grpc-retry-pushback-ms trailer, which gRPC's own retry policy honours: a
// client whose retryPolicy lists the code waits until the holder's lease
// ends instead of its backoff.
func retryLater(ctx context.Context, code codes.Code, reason, msg string, delay time.Duration) error {
	ms := max(delay.Milliseconds(), 1)
	_ = grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", strconv.FormatInt(ms, 10)))
	return refuse(code, reason, msg, delay)
}

// refuse is a status of the interceptor's own, with an ErrorInfo naming
// reason and, when retryAfter > 0, a RetryInfo with that delay.
func refuse(code codes.Code, reason, msg string, retryAfter time.Duration) error {
	st := status.New(code, "idemgrpc: "+msg)
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}}
	if retryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)})
	}
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st.Err()
}

func keyDetail(err error) string {
	var ke *idem.KeyError
	if errors.As(err, &ke) {
		return ke.Reason
	}
	return err.Error()
}

// Reason returns the Reason of the interceptor's ErrorInfo in err's status,
// or "" when err is not one of the interceptor's own statuses.
func Reason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			return info.GetReason()
		}
	}
	return ""
}

// RetryDelay returns the RetryInfo delay in err's status and whether it has
// one: on Aborted, the time until the holder's lease ends.
func RetryDelay(err error) (time.Duration, bool) {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}
