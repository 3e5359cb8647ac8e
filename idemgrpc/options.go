package idemgrpc

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/idemgo/idem"
)

// Defaults for Options.
const (
	DefaultMaxResponseSize = 1 << 20        // marshalled reply bytes recorded for replay
	DefaultRetention       = 24 * time.Hour // how long replies are replayed (as idemhttp)
	DefaultRetryAfter      = time.Second    // RetryInfo when the holder's lease end is unknown, and on Unavailable
)

// Options configure the server interceptor. Scope, Principal (or
// AllowAnonymous) and Methods or Match are required; every other zero value
// means the default.
type Options struct {
	// Scope names the service the keys belong to ("payments"). Required:
	// services sharing a store must not share key spaces.
	Scope string

	// Principal returns the caller's identity (user id, API key id, tenant)
	// from the call's context, as set by the authentication interceptor
	// that runs before this one. The stored key combines it with the
	// client's key, so a client that guesses or reuses another client's key
	// never receives that client's reply. An error or an empty principal
	// answers Unauthenticated. Required unless AllowAnonymous is set.
	Principal func(ctx context.Context) (string, error)

	// AllowAnonymous accepts keyed calls without a principal: all callers
	// then share one key space, and a caller who learns another's key
	// receives that caller's recorded reply. Use it only when every caller
	// is the same party or keys are unguessable and secret.
	AllowAnonymous bool

	// Methods are the full method names ("/payments.v1.Payments/Charge")
	// the interceptor handles; Match, when set, selects further methods.
	// Every other method passes through untouched: a read-only or naturally
	// idempotent method gains nothing from a record. One of the two is
	// required.
	Methods []string
	Match   func(fullMethod string) bool

	// MetadataKey is the request metadata that carries the client's key.
	// Default DefaultMetadataKey ("idempotency-key"). gRPC lower-cases
	// metadata keys; this one is lower-cased too.
	MetadataKey string

	// ValidateKey checks the client's key against the format the API
	// publishes (a UUID, say): low-entropy keys are easier to guess. An
	// error answers InvalidArgument with its text. Default: any key of
	// 1..MaxKeyLen visible ASCII characters.
	ValidateKey func(key string) error

	// Required answers InvalidArgument to a covered call without a key.
	// Otherwise such a call is served without deduplication.
	Required bool

	// RecordCodes are the status codes of handler errors that are recorded
	// and replayed, as a reply is: errors the handler's effects cannot
	// change on a retry (InvalidArgument after a validation that ran,
	// say). By default none is: a handler error releases the key and the
	// client's retry runs the handler again, which assumes the handler
	// rolled its effects back (or that repeating them is harmless). OK is
	// ignored here.
	RecordCodes []codes.Code

	// MaxResponseSize bounds the marshalled reply recorded for replay. The
	// first caller always receives the whole reply; a longer one completes
	// the key without it and later retries answer FailedPrecondition
	// (ReasonNotReplayable). Default 1 MiB.
	MaxResponseSize int

	// RetryAfter is the RetryInfo delay on Unavailable (store down) and on
	// Aborted when the holder's lease end is unknown. Default 1s.
	RetryAfter time.Duration

	// Guard sets the advanced guard options: Lease, Retention (default here
	// 24h), Stale, Observer, Clock, StoreTimeout. Scope, Key, Fingerprint
	// and MaxResultSize are set by the interceptor.
	//
	// Stale defaults here to idem.StaleRetake, not to the guard's park: a
	// client retrying with its key after a crashed call expects a reply,
	// not FailedPrecondition until an operator acts. Choose idem.StalePark
	// when the method's effects outside its database cannot be repeated
	// safely (no key derived with idem.DeriveKey downstream).
	Guard idem.Options
}

// config is Options validated, with defaults filled in and lookups built.
type config struct {
	Options
	methods map[string]bool
	record  map[codes.Code]bool
}

func (o Options) config() (*config, error) {
	switch {
	case o.Scope == "":
		return nil, fmt.Errorf("%w: idemgrpc: Scope is required (the service name)", idem.ErrInvalidOptions)
	case o.Principal == nil && !o.AllowAnonymous:
		return nil, fmt.Errorf("%w: idemgrpc: Principal is required: without it a client that guesses another's key "+
			"receives that client's reply (set AllowAnonymous to accept that risk)", idem.ErrInvalidOptions)
	case len(o.Methods) == 0 && o.Match == nil:
		return nil, fmt.Errorf("%w: idemgrpc: list the methods to deduplicate in Methods or select them with Match", idem.ErrInvalidOptions)
	case o.Guard.Stale == idem.StaleReconcile || o.Guard.Reconcile != nil:
		return nil, fmt.Errorf("%w: idemgrpc: Guard.Stale cannot be StaleReconcile (nor Guard.Reconcile set): a reconciled call has no "+
			"reply to replay (use StaleRetake, the default here, or StalePark)", idem.ErrInvalidOptions)
	case o.MaxResponseSize < 0 || o.RetryAfter < 0:
		return nil, fmt.Errorf("%w: idemgrpc: negative MaxResponseSize or RetryAfter", idem.ErrInvalidOptions)
	}
	if o.MaxResponseSize == 0 {
		o.MaxResponseSize = DefaultMaxResponseSize
	}
	if o.RetryAfter == 0 {
		o.RetryAfter = DefaultRetryAfter
	}
	o.MetadataKey = metadataKey(o.MetadataKey)
	c := &config{Options: o, methods: make(map[string]bool), record: make(map[codes.Code]bool)}
	for _, m := range o.Methods {
		c.methods[m] = true
	}
	for _, code := range o.RecordCodes {
		if code != codes.OK {
			c.record[code] = true
		}
	}
	return c, nil
}

func (c *config) covers(fullMethod string) bool {
	return c.methods[fullMethod] || c.Match != nil && c.Match(fullMethod)
}

// guardOptions builds the guard's options from the interceptor's.
func (c *config) guardOptions() idem.Options {
	g := c.Guard
	g.Scope = c.Scope
	g.Key = nil
	g.Fingerprint = nil
	g.MaxResultSize = c.MaxResponseSize + recordOverhead
	if g.Retention == 0 {
		g.Retention = DefaultRetention
	}
	if g.Stale == idem.StaleDefault {
		g.Stale = idem.StaleRetake // see Options.Guard: the client's retry expects a reply
	}
	return g
}
