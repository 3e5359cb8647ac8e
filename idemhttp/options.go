package idemhttp

import (
	"fmt"
	"net/http"
	"time"

	"github.com/idemgo/idem"
)

// Defaults for Options.
const (
	DefaultMaxBodySize     = 1 << 20        // request bodies buffered for the fingerprint
	DefaultMaxResponseSize = 1 << 20        // response bodies recorded for replay
	DefaultRetention       = 24 * time.Hour // how long responses are replayed (Stripe keeps 24h)
	DefaultRetryAfter      = time.Second    // Retry-After on 409 and 503
)

// DefaultReplayHeaders are the response headers recorded and replayed when
// Options.ReplayHeaders is nil: those that describe the body or the created
// resource. Set-Cookie and other per-client headers are never replayed unless
// listed, so one client's session cannot leak into another's replay.
var DefaultReplayHeaders = []string{
	"Content-Type", "Content-Encoding", "Content-Language", "Content-Location",
	"Location", "ETag", "Last-Modified", "Cache-Control", "Vary",
}

// Options configure the middleware. Scope and Principal are required (or
// AllowAnonymous instead of Principal); every other zero value means the
// default.
type Options struct {
	// Scope names the service or route the keys belong to ("payments").
	// Required: services sharing a store must not share key spaces.
	Scope string

	// Principal returns the caller's identity (user id, API key id, tenant)
	// from the authenticated request. The stored key combines it with the
	// client's key, so a client that guesses or reuses another client's key
	// never receives that client's response. An error or an empty principal
	// answers 401. Required unless AllowAnonymous is set.
	Principal func(*http.Request) (string, error)

	// AllowAnonymous accepts keyed requests without a principal: all callers
	// then share one key space, and a caller who learns another's key
	// receives that caller's recorded response. Use it only when every
	// caller is the same party (an internal service) or keys are
	// unguessable and secret, and responses carry nothing private.
	AllowAnonymous bool

	// Methods are the methods the middleware handles; others pass through
	// untouched. Default POST and PATCH (PUT and DELETE are idempotent by
	// definition).
	Methods []string

	// ValidateKey checks the client's key against the format the API
	// publishes (a UUID, say), as the draft's security considerations
	// advise: low-entropy keys are easier to guess. An error answers 400
	// with the error's text as the detail. Default: any key of 1..MaxKeyLen
	// printable ASCII characters.
	ValidateKey func(key string) error

	// Required answers 400 to a covered request without an Idempotency-Key.
	// Otherwise such a request is served without deduplication.
	Required bool

	// MaxBodySize bounds the request body buffered to fingerprint it and
	// hand it on to the handler; a longer body answers 413. Default 1 MiB.
	MaxBodySize int64

	// MaxResponseSize bounds the response body recorded for replay. The
	// first client always receives the whole response; if it is longer than
	// this, the key is completed without the body and later retries answer
	// 410 (ProblemNotReplayable). Default 1 MiB.
	MaxResponseSize int

	// FingerprintHeaders are request headers whose values are part of the
	// fingerprint besides the method, path, query and body (for example
	// "Content-Type" or an API version header).
	FingerprintHeaders []string

	// ReplayHeaders are the response headers recorded and replayed. Nil means
	// DefaultReplayHeaders; list "Set-Cookie" explicitly to replay cookies.
	ReplayHeaders []string

	// Record5xx records 5xx responses and replays them to retries. By default
	// a 5xx response releases the key, so a retry runs the handler again.
	//
	// The draft leaves this to the server. Stripe records the result of any
	// request that started executing, 500s included, because the handler may
	// have had effects before it failed; releasing assumes a 5xx handler
	// rolled its effects back (or that repeating them is harmless, for
	// example because downstream calls carry keys from DeriveKey).
	Record5xx bool

	// RetryAfter is the Retry-After sent with 409 (in progress) and 503
	// (store down). Default 1s.
	RetryAfter time.Duration

	// Guard sets the advanced guard options: Lease, Retention (default here
	// 24h), Stale, Observer, Clock, StoreTimeout. Scope, Key, Fingerprint
	// and MaxResultSize are set by the middleware.
	//
	// Stale defaults here to idem.StaleRetake, not to the guard's park: a
	// client retrying with its key after a crashed attempt expects an
	// answer, not a 409 until an operator acts, and the request is the
	// client's own retry. Choose idem.StalePark when the handler's effects
	// outside the request's database cannot be repeated safely (a charge
	// without a key derived with idem.DeriveKey): the client then gets
	// 409 ProblemStale until an operator resolves the key.
	Guard idem.Options
}

// config is Options validated, with defaults filled in and lookups built.
type config struct {
	Options
	methods map[string]bool
	replay  map[string]bool // canonical header names
}

func (o Options) config() (*config, error) {
	if o.Scope == "" {
		return nil, fmt.Errorf("%w: idemhttp: Scope is required (the service or route name)", idem.ErrInvalidOptions)
	}
	if o.Principal == nil && !o.AllowAnonymous {
		return nil, fmt.Errorf("%w: idemhttp: Principal is required: without it a client that guesses another's key "+
			"receives that client's response (set AllowAnonymous to accept that risk)", idem.ErrInvalidOptions)
	}
	if err := checkGuard(o.Guard); err != nil {
		return nil, err
	}
	if o.MaxBodySize < 0 || o.MaxResponseSize < 0 || o.RetryAfter < 0 {
		return nil, fmt.Errorf("%w: idemhttp: negative MaxBodySize, MaxResponseSize or RetryAfter", idem.ErrInvalidOptions)
	}
	if o.MaxBodySize == 0 {
		o.MaxBodySize = DefaultMaxBodySize
	}
	if o.MaxResponseSize == 0 {
		o.MaxResponseSize = DefaultMaxResponseSize
	}
	if o.RetryAfter == 0 {
		o.RetryAfter = DefaultRetryAfter
	}
	if o.Methods == nil {
		o.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if o.ReplayHeaders == nil {
		o.ReplayHeaders = DefaultReplayHeaders
	}
	c := &config{Options: o, methods: make(map[string]bool), replay: make(map[string]bool)}
	for _, m := range o.Methods {
		c.methods[m] = true
	}
	for _, h := range o.ReplayHeaders {
		c.replay[http.CanonicalHeaderKey(h)] = true
	}
	return c, nil
}

// checkGuard rejects guard options that cannot work over HTTP.
func checkGuard(g idem.Options) error {
	if g.Stale == idem.StaleReconcile || g.Reconcile != nil {
		return fmt.Errorf("%w: idemhttp: Guard.Stale cannot be StaleReconcile (nor Guard.Reconcile set): a reconciled request has no "+
			"response to replay (use StaleRetake, the default here, or StalePark)", idem.ErrInvalidOptions)
	}
	return nil
}

// guardOptions builds the guard's options from the middleware's.
func guardOptions(scope string, g idem.Options, maxResult int, retention time.Duration) idem.Options {
	g.Scope = scope
	g.Key = nil
	g.Fingerprint = nil
	g.MaxResultSize = maxResult
	if g.Retention == 0 {
		g.Retention = retention
	}
	if g.Stale == idem.StaleDefault {
		g.Stale = idem.StaleRetake // see Options.Guard: the client's retry expects an answer
	}
	return g
}
