// Package idemhttp makes HTTP endpoints, webhook receivers and outgoing API
// calls idempotent with an idem store.
//
// # Idempotency-Key middleware
//
// New returns middleware following the IETF draft "The Idempotency-Key HTTP
// Header Field" (draft-ietf-httpapi-idempotency-key-header) and the behaviour
// users know from Stripe. A client that may retry a POST sends a unique key:
//
//	POST /payments
//	Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"
//
// The first request with a key runs the handler, which answers the client
// as usual while its status, chosen headers and body are recorded. A retry
// with the same key after that gets the recorded response again, with
// Idempotent-Replayed: true, and the handler does not run. A retry while the
// first is still running gets 409 Conflict with Retry-After; the same key
// with a different request (method, path, query, body, chosen headers) gets
// 422; a missing key on a route that requires one gets 400; a store that is
// down gets 503. Every error body is an RFC 9457 problem+json (see Problem).
//
//	store := memory.New() // or sqlite, postgres, mysql, redis
//	mw, err := idemhttp.New(store, idemhttp.Options{
//		Scope:     "payments",
//		Principal: func(r *http.Request) (string, error) { return auth.UserID(r) },
//		Required:  true,
//	})
//	if err != nil {
//		return err
//	}
//	mux := http.NewServeMux()
//	mux.Handle("POST /payments", mw.Wrap(payments))
//
// Middleware.Wrap is a func(http.Handler) http.Handler, so it also plugs
// into chi (r.Use(mw.Wrap)), gorilla/mux (r.Use(mw.Wrap)) and anything else
// built on net/http.
//
// # Keys are scoped by caller
//
// The stored key is (Scope, principal + client key). Without the principal,
// a client that guesses or reuses another client's key would receive that
// client's response, so Options.Principal is required; AllowAnonymous opts
// out and says why that is dangerous. Place the middleware after
// authentication so Principal can read the caller.
//
// # What is recorded
//
// Responses below 500 are recorded; a 5xx releases the key so the client's
// retry runs the handler again, unless Options.Record5xx asks to record them
// as Stripe does (the draft leaves the choice to the server). A handler that
// panics releases the key too. The request body is buffered (up to
// MaxBodySize, 413 beyond) to fingerprint it and handed to the handler
// intact. Only headers on the ReplayHeaders allow-list are recorded and
// replayed; Set-Cookie never is unless listed.
//
// The handler's context is the request's: when the client disconnects it is
// cancelled as usual. Whatever the handler answers then is recorded (or
// released, for a 5xx), so the client's retry sees the outcome. The handler's
// context also carries the idem key, so idem.DeriveKey and Transport give its
// downstream calls keys that are stable across the client's retries.
//
// The first client's response is streamed as the handler writes it; the
// record is completed when the handler returns. A retry that arrives in
// between gets 409 and retries after Retry-After. If the store cannot
// complete the record (it went down mid-request), the key stays in progress
// until its lease ends (Options.Guard.Lease, default 30s); a retry after
// that runs the handler again, as after a crash. A hijacked connection
// cannot be recorded and releases the key.
//
// # Webhooks
//
// Webhook returns a receiver that handles each delivery id once per sender;
// a redelivery answers 200 without running the handler:
//
//	gh, err := idemhttp.Webhook(store, idemhttp.WebhookOptions{
//		Sender: "github", IDHeader: "X-GitHub-Delivery", Verify: checkSignature,
//	})
//	st, err := idemhttp.Webhook(store, idemhttp.WebhookOptions{
//		Sender: "stripe", Key: idem.JSONFieldsKey("id"), Verify: checkStripeSignature,
//	})
//
// # Outgoing calls
//
// Transport sets Idempotency-Key on outgoing POST and PATCH requests from the
// key of the message being processed (idem.DeriveKey), so a downstream API
// deduplicates the calls repeated when a message is redelivered.
package idemhttp
