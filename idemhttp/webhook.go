package idemhttp

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemgo/idem"
)

// DefaultWebhookMaxBodySize bounds webhook bodies: GitHub caps its payloads
// at 25 MB.
const DefaultWebhookMaxBodySize = 25 << 20

// DefaultWebhookRetention is how long delivery ids are remembered: longer
// than senders keep redelivering (Stripe retries for up to three days).
const DefaultWebhookRetention = 7 * 24 * time.Hour

// WebhookOptions configure a webhook receiver. Sender and one of IDHeader or
// Key are required.
type WebhookOptions struct {
	// Sender names who sends the webhooks ("github", "stripe"). The keys are
	// scoped by it ("webhook/github"), so two senders' delivery ids never
	// collide.
	Sender string

	// IDHeader is the header carrying the sender's delivery id, the same on
	// every redelivery: "X-GitHub-Delivery" for GitHub.
	IDHeader string

	// Key extracts the delivery id when it is not in a header. It receives an
	// idem.Message with the request headers (first value each), the body as
	// Payload and the Content-Type: idem.JSONFieldsKey("id") reads a
	// Stripe-style event id from the JSON body.
	Key idem.KeyFunc

	// Verify checks the delivery's signature on the raw body (GitHub's
	// X-Hub-Signature-256, Stripe-Signature) before its id is claimed; an
	// error answers 401. Verify here or in a handler placed before the
	// receiver: otherwise anyone who can reach the endpoint can claim a
	// delivery id first and make the real delivery look like a duplicate.
	Verify func(r *http.Request, body []byte) error

	// Methods the receiver handles; others pass through. Default POST.
	Methods []string

	// MaxBodySize bounds the buffered body; beyond it the answer is 413.
	// Default 25 MiB.
	MaxBodySize int64

	// NoFingerprint turns off the body check. By default a delivery whose id
	// was seen with a different body answers 422 (and the guard's Observer
	// reports the conflict) instead of being dropped as a duplicate.
	NoFingerprint bool

	// RetryAfter is sent with 409 (the first delivery is still being
	// handled) and 503 (store down). Default 1s.
	RetryAfter time.Duration

	// Guard sets the advanced guard options (Lease, Retention, Observer,
	// ...), as in Options.Guard. Retention (default 7 days) must outlast the
	// sender's redelivery window, manual redeliveries included.
	Guard idem.Options
}

// Webhook returns a receiver that handles each delivery once: a delivery
// whose id was handled before answers 200 with Idempotent-Replayed: true
// without running the handler, so the sender stops redelivering it. Only a
// 2xx answer from the handler completes the id; any other status releases it,
// so the sender's redelivery runs the handler again.
//
// The returned Middleware wraps the webhook handler like New's does.
func Webhook(store idem.Store, opts WebhookOptions) (*Middleware, error) {
	switch {
	case opts.Sender == "":
		return nil, fmt.Errorf("%w: idemhttp: WebhookOptions.Sender is required (\"github\", \"stripe\")", idem.ErrInvalidOptions)
	case opts.IDHeader == "" && opts.Key == nil:
		return nil, fmt.Errorf("%w: idemhttp: set WebhookOptions.IDHeader or WebhookOptions.Key", idem.ErrInvalidOptions)
	case opts.IDHeader != "" && opts.Key != nil:
		return nil, fmt.Errorf("%w: idemhttp: set only one of WebhookOptions.IDHeader and WebhookOptions.Key", idem.ErrInvalidOptions)
	case opts.MaxBodySize < 0 || opts.RetryAfter < 0:
		return nil, fmt.Errorf("%w: idemhttp: negative MaxBodySize or RetryAfter", idem.ErrInvalidOptions)
	}
	if err := checkGuard(opts.Guard); err != nil {
		return nil, err
	}
	if opts.Key == nil {
		opts.Key = idem.HeaderKey(opts.IDHeader)
	}
	if opts.MaxBodySize == 0 {
		opts.MaxBodySize = DefaultWebhookMaxBodySize
	}
	if opts.RetryAfter == 0 {
		opts.RetryAfter = DefaultRetryAfter
	}
	if opts.Methods == nil {
		opts.Methods = []string{http.MethodPost}
	}
	scope := "webhook/" + opts.Sender
	// Only the status is recorded: senders do not read the answer to a
	// duplicate beyond its status.
	g, err := idem.New(store, guardOptions(scope, opts.Guard, headerBudget, DefaultWebhookRetention))
	if err != nil {
		return nil, err
	}
	wh := &webhook{opts: opts, scope: scope, methods: make(map[string]bool), run: &runner{
		guard: g, allow: map[string]bool{}, limit: 0, retryAfter: opts.RetryAfter,
		keep: func(status int) bool { return status >= 200 && status < 300 },
		dup:  acknowledgeDuplicate, what: "delivery id",
	}}
	for _, m := range opts.Methods {
		wh.methods[m] = true
	}
	return &Middleware{run: wh.run, serve: wh.serve}, nil
}

type webhook struct {
	opts    WebhookOptions
	scope   string
	methods map[string]bool
	run     *runner
}

func (wh *webhook) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if !wh.methods[r.Method] {
		next.ServeHTTP(w, r)
		return
	}
	body, ok := readBody(w, r, wh.opts.MaxBodySize)
	if !ok {
		return
	}
	if wh.opts.Verify != nil {
		if err := wh.opts.Verify(r, body); err != nil {
			writeProblem(w, http.StatusUnauthorized, ProblemWebhookUnverified, "The delivery's signature was not accepted.", 0)
			return
		}
	}
	id, err := wh.opts.Key(message(r, body))
	if err != nil {
		detail := "The delivery carries no usable delivery id."
		var ke *idem.KeyError
		if errors.As(err, &ke) {
			detail = "The delivery carries no usable delivery id: " + ke.Reason + "."
		}
		writeProblem(w, http.StatusBadRequest, ProblemWebhookNoID, detail, 0)
		return
	}
	var fp string
	if !wh.opts.NoFingerprint {
		fp = idem.Fingerprint(body)
	}
	wh.run.serve(w, r, next, idem.Key{Scope: wh.scope, ID: id}, fp)
}

// message presents the request to an idem.KeyFunc.
func message(r *http.Request, body []byte) idem.Message {
	h := make(map[string]string, len(r.Header))
	for k, vs := range r.Header {
		if len(vs) > 0 {
			h[k] = vs[0]
		}
	}
	return idem.Message{Headers: h, Payload: body, ContentType: r.Header.Get("Content-Type")}
}

func acknowledgeDuplicate(w http.ResponseWriter, _ idem.Result, _ map[string]bool) {
	w.Header().Set(HeaderReplayed, "true")
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusOK)
}
