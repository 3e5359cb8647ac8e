package idemhttp

import (
	"net/http"

	"github.com/idemgo/idem"
)

// Transport is an http.RoundTripper that puts an Idempotency-Key on the
// outgoing requests made while a message is processed, so the downstream API
// deduplicates them when the message is redelivered and processed again.
//
// The key is idem.DeriveKey(req.Context(), name): the same message and call
// site give the same key on every redelivery and every instance. Requests
// whose context carries no idem key (see idem.ContextWithKey; the guard's
// handlers get one), requests that already have the header, and methods not
// listed pass through unchanged.
//
// A handler that makes several different calls to one endpoint for one
// message must tell them apart with Name (or set the header itself):
// otherwise they share a key and the downstream API answers the second with
// the first's response.
//
//	client := &http.Client{Transport: &idemhttp.Transport{}}
//	g.Do(ctx, msg, func(ctx context.Context) ([]byte, error) {
//		req, _ := http.NewRequestWithContext(ctx, "POST", "https://api.example.com/v1/charges", body)
//		resp, err := client.Do(req) // Idempotency-Key: "idem-…", stable for this message
//		...
//	})
type Transport struct {
	// Base performs the requests. Default http.DefaultTransport.
	Base http.RoundTripper

	// Name names the call site within the message's processing. Default:
	// method + " " + host + path.
	Name func(*http.Request) string

	// Methods get a key; default POST and PATCH.
	Methods []string

	// Header is the header set; default Idempotency-Key. Some APIs use their
	// own name for the same thing.
	Header string

	// Bare sends the key unquoted (idem-…) instead of as the draft's
	// Structured Field string ("idem-…"). Stripe and most deployed APIs
	// expect it bare; this package's middleware takes both as the same key.
	Bare bool
}

// RoundTrip implements http.RoundTripper. It does not modify req: a keyed
// request is a clone.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	header := t.Header
	if header == "" {
		header = HeaderKey
	}
	if !t.covers(req.Method) || req.Header.Get(header) != "" {
		return base.RoundTrip(req)
	}
	name := req.Method + " " + req.URL.Host + req.URL.EscapedPath()
	if t.Name != nil {
		name = t.Name(req)
	}
	key := idem.DeriveKey(req.Context(), name)
	if key == "" {
		return base.RoundTrip(req)
	}
	if !t.Bare {
		key = FormatKey(key)
	}
	out := req.Clone(req.Context())
	out.Header.Set(header, key)
	return base.RoundTrip(out)
}

func (t *Transport) covers(method string) bool {
	if t.Methods == nil {
		return method == http.MethodPost || method == http.MethodPatch
	}
	for _, m := range t.Methods {
		if m == method {
			return true
		}
	}
	return false
}
