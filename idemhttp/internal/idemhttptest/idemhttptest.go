// Package idemhttptest holds what idemhttp's tests share with their runs on
// the SQLite store in idemhttp/internal/integration: the middleware in
// front of an httptest server with the tests' principal (Server), a
// counting handler, requests and their answers (TryDo, Reply), the
// concurrency behaviours that go through the store (Run) and the
// middleware's benchmark (BenchMiddleware), each run on the store a caller
// opens. It imports the standard library, the root module and idemhttp
// only, so idemhttp's tests run them on store/memory without a test store
// in its go.mod.
package idemhttptest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp"
)

// UserPrincipal reads the caller from X-User, standing in for real
// authentication.
func UserPrincipal(r *http.Request) (string, error) {
	u := r.Header.Get("X-User")
	if u == "" {
		return "", errors.New("unauthenticated")
	}
	return u, nil
}

// Server starts an httptest server with handler behind the middleware.
func Server(t *testing.T, store idem.Store, opts idemhttp.Options, h http.Handler) *httptest.Server {
	t.Helper()
	if opts.Scope == "" {
		opts.Scope = "test"
	}
	if opts.Principal == nil && !opts.AllowAnonymous {
		opts.Principal = UserPrincipal
	}
	mw, err := idemhttp.New(store, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Wrap(h))
	t.Cleanup(srv.Close)
	return srv
}

// Counting is a handler that counts its runs and answers 201 with a body
// naming the user and echoing the request body.
type Counting struct {
	Calls atomic.Int64
}

func (c *Counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.Calls.Add(1)
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/payments/1")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"user": r.Header.Get("X-User"), "body": string(body), "run": n})
}

// Reply is an answer: its status, header and body.
type Reply struct {
	Status int
	Header http.Header
	Body   string
}

// Replayed reports whether the answer is a replay (Idempotent-Replayed).
func (r Reply) Replayed() bool { return r.Header.Get(idemhttp.HeaderReplayed) == "true" }

// Problem is the answer's problem body; it fails the test unless the answer
// is a problem whose status is the answer's.
func (r Reply) Problem(t *testing.T) idemhttp.Problem {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("status %d: Content-Type %q, want application/problem+json (body %s)", r.Status, ct, r.Body)
	}
	var p idemhttp.Problem
	if err := json.Unmarshal([]byte(r.Body), &p); err != nil {
		t.Fatalf("problem body %q: %v", r.Body, err)
	}
	if p.Status != r.Status || p.Type == "" || p.Title == "" {
		t.Fatalf("problem %+v does not match status %d", p, r.Status)
	}
	return p
}

// TryDo sends a request with the given headers (name, value, ...) and
// returns the answer; any goroutine may call it.
func TryDo(client *http.Client, method, url, body string, headers ...string) (Reply, error) {
	req, err := http.NewRequestWithContext(context.Background(), method, url, strings.NewReader(body))
	if err != nil {
		return Reply{}, err
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return Reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Reply{}, err
	}
	return Reply{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}, nil
}
