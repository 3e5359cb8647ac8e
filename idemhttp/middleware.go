package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/idemgo/idem"
)

// Middleware makes the handlers it wraps idempotent: New's keyed by the
// client's Idempotency-Key and caller, Webhook's by the sender's delivery id.
// It is safe for concurrent use; build it once and wrap any number of
// handlers.
type Middleware struct {
	run   *runner
	serve func(w http.ResponseWriter, r *http.Request, next http.Handler)
}

// New returns the middleware over store. Options are validated once here;
// the error wraps idem.ErrInvalidOptions and says what to fix.
func New(store idem.Store, opts Options) (*Middleware, error) {
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	g, err := idem.New(store, guardOptions(cfg.Scope, cfg.Guard, cfg.MaxResponseSize+headerBudget, DefaultRetention))
	if err != nil {
		return nil, err
	}
	k := &keyed{cfg: cfg, run: &runner{
		guard: g, allow: cfg.replay, limit: cfg.MaxResponseSize, retryAfter: cfg.RetryAfter,
		keep: func(status int) bool { return status < 500 || cfg.Record5xx },
		dup:  replayRecorded, what: HeaderKey,
	}}
	return &Middleware{run: k.run, serve: k.serve}, nil
}

// keyed is the Idempotency-Key flow.
type keyed struct {
	cfg *config
	run *runner
}

// Guard returns the guard that records the responses (its store, its
// options with defaults filled in).
func (m *Middleware) Guard() *idem.Guard { return m.run.guard }

// Wrap returns next behind the middleware. Its signature is the
// func(http.Handler) http.Handler that routers (chi's Use, gorilla/mux's
// Use) take.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}

func (m *keyed) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	c := m.cfg
	if !c.methods[r.Method] {
		next.ServeHTTP(w, r)
		return
	}
	values := r.Header.Values(HeaderKey)
	if len(values) == 0 {
		if c.Required {
			writeProblem(w, http.StatusBadRequest, ProblemKeyMissing,
				fmt.Sprintf("%s requests to this resource need an %s header.", r.Method, HeaderKey), 0)
			return
		}
		next.ServeHTTP(w, r)
		return
	}
	if len(values) > 1 {
		writeProblem(w, http.StatusBadRequest, ProblemKeyInvalid, "Send exactly one "+HeaderKey+" header.", 0)
		return
	}
	clientKey, err := ParseKey(values[0])
	if err == nil && c.ValidateKey != nil {
		err = c.ValidateKey(clientKey)
	}
	if err != nil {
		writeProblem(w, http.StatusBadRequest, ProblemKeyInvalid, keyDetail(err), 0)
		return
	}
	principal, ok := m.principal(w, r)
	if !ok {
		return
	}
	body, ok := readBody(w, r, c.MaxBodySize)
	if !ok {
		return
	}
	key := idem.Key{Scope: c.Scope, ID: storedID(principal, clientKey)}
	fp := fingerprint(r, body, c.FingerprintHeaders)
	m.run.serve(w, r, next, key, fp)
}

func (m *keyed) principal(w http.ResponseWriter, r *http.Request) (string, bool) {
	if m.cfg.Principal == nil {
		return "", true // AllowAnonymous
	}
	p, err := m.cfg.Principal(r)
	if err == nil && p == "" && !m.cfg.AllowAnonymous {
		err = errors.New("no principal")
	}
	if err != nil {
		writeProblem(w, http.StatusUnauthorized, ProblemUnauthenticated,
			"Requests with an "+HeaderKey+" need an authenticated caller.", 0)
		return "", false
	}
	return p, true
}

// onDuplicate answers a request whose key was completed before, from the
// recorded result.
type onDuplicate func(w http.ResponseWriter, res idem.Result, allow map[string]bool)

func replayRecorded(w http.ResponseWriter, res idem.Result, allow map[string]bool) {
	if len(res.Value) == 0 {
		writeProblem(w, http.StatusGone, ProblemNotReplayable,
			"The request with this key was processed, but its response was too large to record. Do not retry it with a new key.", 0)
		return
	}
	rec, err := decodeResponse(res.Value)
	if err != nil {
		writeProblem(w, http.StatusGone, ProblemNotReplayable,
			"The request with this key was processed, but its recorded response cannot be read.", 0)
		return
	}
	if rec.bodyDropped {
		writeProblem(w, http.StatusGone, ProblemNotReplayable,
			fmt.Sprintf("The request with this key was processed (status %d), but its response body was too large to record. "+
				"Do not retry it with a new key.", rec.status), 0)
		return
	}
	replay(w, rec, allow)
}

// runner runs the guarded flow for one request; the middleware and the
// webhook receiver differ in what they record and how they answer duplicates.
type runner struct {
	guard      *idem.Guard
	allow      map[string]bool // response headers recorded and replayed
	limit      int             // response body bytes recorded
	keep       func(int) bool  // statuses recorded; others release the key
	retryAfter time.Duration   // on 409 and 503
	dup        onDuplicate
	what       string // what the key is called in problem details
}

// serve claims key, runs next with a recorder on the first request, and
// answers every other outcome: replay, 409, 422, 503.
func (rn *runner) serve(w http.ResponseWriter, r *http.Request, next http.Handler, key idem.Key, fp string) {
	allow, retryAfter := rn.allow, rn.retryAfter
	var ran bool
	res, err := rn.guard.DoKey(r.Context(), key, fp, func(ctx context.Context) ([]byte, error) {
		ran = true
		rec := newRecorder(w, allow, rn.limit)
		next.ServeHTTP(rec, r.WithContext(ctx))
		return rec.finish(rn.keep)
	})

	if ran {
		// The handler answered the client itself. A release (5xx), a lost
		// lease or a failed completion leave the key retryable; the guard's
		// Observer reports them.
		return
	}
	switch {
	case err == nil: // a duplicate: the handler ran for an earlier request
		rn.dup(w, res, allow)
	case errors.Is(err, idem.ErrConflict):
		writeProblem(w, http.StatusUnprocessableEntity, ProblemKeyReused,
			"This "+rn.what+" was used before with a different request (method, path, query, body or headers).", 0)
	case errors.Is(err, idem.ErrInProgress):
		writeProblem(w, http.StatusConflict, ProblemInProgress,
			"A request with this "+rn.what+" is being processed. Retry later with the same key.", retryAfter)
	case errors.Is(err, idem.ErrStale):
		writeProblem(w, http.StatusConflict, ProblemStale,
			"An earlier attempt with this "+rn.what+" stopped before finishing and awaits an operator.", 0)
	case errors.Is(err, idem.ErrNoKey), errors.Is(err, idem.ErrInvalidKey):
		writeProblem(w, http.StatusBadRequest, ProblemKeyInvalid, keyDetail(err), 0)
	default:
		writeProblem(w, http.StatusServiceUnavailable, ProblemUnavailable,
			"The idempotency store could not be reached. Retry later with the same key.", retryAfter)
	}
}

func keyDetail(err error) string {
	var ke *idem.KeyError
	if errors.As(err, &ke) {
		return strings.TrimPrefix(ke.Reason, HeaderKey+": ")
	}
	return err.Error()
}
