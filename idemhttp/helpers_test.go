package idemhttp_test

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
	"github.com/idemgo/idem/store/memory"
)

// userPrincipal reads the caller from X-User, standing in for real
// authentication.
func userPrincipal(r *http.Request) (string, error) {
	u := r.Header.Get("X-User")
	if u == "" {
		return "", errors.New("unauthenticated")
	}
	return u, nil
}

// server starts an httptest server with handler behind the middleware.
func server(t *testing.T, store idem.Store, opts idemhttp.Options, h http.Handler) *httptest.Server {
	t.Helper()
	if opts.Scope == "" {
		opts.Scope = "test"
	}
	if opts.Principal == nil && !opts.AllowAnonymous {
		opts.Principal = userPrincipal
	}
	mw, err := idemhttp.New(store, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Wrap(h))
	t.Cleanup(srv.Close)
	return srv
}

// counting is a handler that counts its runs and answers 201 with a body
// naming the user and echoing the request body.
type counting struct {
	calls atomic.Int64
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.calls.Add(1)
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/payments/1")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"user": r.Header.Get("X-User"), "body": string(body), "run": n})
}

type reply struct {
	status int
	header http.Header
	body   string
}

func (r reply) replayed() bool { return r.header.Get(idemhttp.HeaderReplayed) == "true" }

func (r reply) problem(t *testing.T) idemhttp.Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("status %d: Content-Type %q, want application/problem+json (body %s)", r.status, ct, r.body)
	}
	var p idemhttp.Problem
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	if p.Status != r.status || p.Type == "" || p.Title == "" {
		t.Fatalf("problem %+v does not match status %d", p, r.status)
	}
	return p
}

// do sends a request with the given headers (name, value, ...) and returns
// the answer. It must run on the test's goroutine; others use tryDo.
func do(t testing.TB, client *http.Client, method, url, body string, headers ...string) reply {
	t.Helper()
	r, err := tryDo(client, method, url, body, headers...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func tryDo(client *http.Client, method, url, body string, headers ...string) (reply, error) {
	req, err := http.NewRequestWithContext(context.Background(), method, url, strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}, nil
}

func post(t testing.TB, url, body string, headers ...string) reply {
	t.Helper()
	return do(t, http.DefaultClient, http.MethodPost, url, body, headers...)
}

func newStore() *memory.Store { return memory.New() }

// downStore fails every claim, like a database that is unreachable.
type downStore struct{ idem.Store }

func (downStore) Claim(context.Context, idem.ClaimRequest) (idem.Claim, error) {
	return idem.Claim{}, errors.New("connection refused")
}
