package idemhttp_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp"
	"github.com/idemgo/idem/idemhttp/internal/idemhttptest"
)

// TestConcurrentRequests runs the middleware's behaviours under concurrent
// requests (idemhttptest.Run: of 100 requests with one key, the first runs
// the handler and the others get 409 or its replay) on store/memory;
// idemhttp/internal/integration runs them on the SQLite store.
func TestConcurrentRequests(t *testing.T) {
	idemhttptest.Run(t, func(testing.TB) idem.Store { return newStore() })
}

func TestPrincipalsNeverShareResponses(t *testing.T) {
	c := &idemhttptest.Counting{}
	srv := idemhttptest.Server(t, newStore(), idemhttp.Options{}, c)
	a := post(t, srv.URL, "same", "X-User", "alice", idemhttp.HeaderKey, "shared")
	b := post(t, srv.URL, "same", "X-User", "bob", idemhttp.HeaderKey, "shared")
	if a.Replayed() || b.Replayed() || c.Calls.Load() != 2 {
		t.Fatalf("two principals with one key: replayed %v/%v, calls %d", a.Replayed(), b.Replayed(), c.Calls.Load())
	}
	// Without escaping, ("alice", "shared|x") and ("alice|shared", "x") would
	// both be stored as "alice|shared|x".
	post(t, srv.URL, "same", "X-User", "alice", idemhttp.HeaderKey, "shared|x")
	if e := post(t, srv.URL, "same", "X-User", "alice|shared", idemhttp.HeaderKey, "x"); e.Replayed() {
		t.Fatal("a principal containing the separator collided with another principal's key")
	}
	if c.Calls.Load() != 4 {
		t.Fatalf("calls %d, want 4", c.Calls.Load())
	}
	for user, want := range map[string]idemhttptest.Reply{"alice": a, "bob": b} {
		r := post(t, srv.URL, "same", "X-User", user, idemhttp.HeaderKey, "shared")
		if !r.Replayed() || r.Body != want.Body || !strings.Contains(r.Body, `"user":"`+user+`"`) {
			t.Fatalf("%s's retry got %s, want %s", user, r.Body, want.Body)
		}
	}
}

func TestFingerprintMismatch(t *testing.T) {
	c := &idemhttptest.Counting{}
	srv := idemhttptest.Server(t, newStore(), idemhttp.Options{FingerprintHeaders: []string{"X-Api-Version"}}, c)
	post(t, srv.URL+"/pay?x=1", "a", "X-User", "u", idemhttp.HeaderKey, "k", "X-Api-Version", "1")
	for name, r := range map[string]idemhttptest.Reply{
		"body":   post(t, srv.URL+"/pay?x=1", "b", "X-User", "u", idemhttp.HeaderKey, "k", "X-Api-Version", "1"),
		"path":   post(t, srv.URL+"/other?x=1", "a", "X-User", "u", idemhttp.HeaderKey, "k", "X-Api-Version", "1"),
		"query":  post(t, srv.URL+"/pay?x=2", "a", "X-User", "u", idemhttp.HeaderKey, "k", "X-Api-Version", "1"),
		"header": post(t, srv.URL+"/pay?x=1", "a", "X-User", "u", idemhttp.HeaderKey, "k", "X-Api-Version", "2"),
		"method": do(t, http.DefaultClient, http.MethodPatch, srv.URL+"/pay?x=1", "a", "X-User", "u", idemhttp.HeaderKey, "k", "X-Api-Version", "1"),
	} {
		if r.Status != http.StatusUnprocessableEntity || r.Problem(t).Type != idemhttp.ProblemKeyReused {
			t.Fatalf("changed %s: %d %s, want 422", name, r.Status, r.Body)
		}
	}
	if c.Calls.Load() != 1 {
		t.Fatalf("calls %d", c.Calls.Load())
	}
	if r := post(t, srv.URL+"/pay?x=1", "a", "X-User", "u", idemhttp.HeaderKey, "k", "X-Api-Version", "1"); !r.Replayed() {
		t.Fatalf("identical retry not replayed: %d", r.Status)
	}
}

func TestBadRequests(t *testing.T) {
	c := &idemhttptest.Counting{}
	srv := idemhttptest.Server(t, newStore(), idemhttp.Options{Required: true, MaxBodySize: 10}, c)
	long := strings.Repeat("k", idemhttp.MaxKeyLen+1)
	cases := []struct {
		name    string
		body    string
		headers []string
		status  int
		typ     string
	}{
		{"missing key", "", []string{"X-User", "u"}, 400, idemhttp.ProblemKeyMissing},
		{"empty key", "", []string{"X-User", "u", idemhttp.HeaderKey, ""}, 400, idemhttp.ProblemKeyInvalid},
		{"empty string", "", []string{"X-User", "u", idemhttp.HeaderKey, `""`}, 400, idemhttp.ProblemKeyInvalid},
		{"unterminated", "", []string{"X-User", "u", idemhttp.HeaderKey, `"abc`}, 400, idemhttp.ProblemKeyInvalid},
		{"too long", "", []string{"X-User", "u", idemhttp.HeaderKey, long}, 400, idemhttp.ProblemKeyInvalid},
		{"two keys", "", []string{"X-User", "u", idemhttp.HeaderKey, "a", idemhttp.HeaderKey, "b"}, 400, idemhttp.ProblemKeyInvalid},
		{"no principal", "", []string{idemhttp.HeaderKey, "a"}, 401, idemhttp.ProblemUnauthenticated},
		{"body too large", "01234567890", []string{"X-User", "u", idemhttp.HeaderKey, "a"}, 413, idemhttp.ProblemTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := post(t, srv.URL, tc.body, tc.headers...)
			if r.Status != tc.status {
				t.Fatalf("status %d %s, want %d", r.Status, r.Body, tc.status)
			}
			if p := r.Problem(t); p.Type != tc.typ || p.Detail == "" {
				t.Fatalf("problem %+v, want type %s with a detail", p, tc.typ)
			}
		})
	}
	// A body of unknown length (chunked) over the limit is caught while reading.
	req, _ := http.NewRequest(http.MethodPost, srv.URL, struct{ *strings.Reader }{strings.NewReader(strings.Repeat("x", 100))})
	req.Header.Set("X-User", "u")
	req.Header.Set(idemhttp.HeaderKey, "chunked")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("body of unknown length over the limit: %d", resp.StatusCode)
	}
	if c.Calls.Load() != 0 {
		t.Fatalf("handler ran %d times on bad requests", c.Calls.Load())
	}
	// Methods not covered pass through without a key.
	if r := do(t, http.DefaultClient, http.MethodPut, srv.URL, "", "X-User", "u"); r.Status != http.StatusCreated {
		t.Fatalf("PUT: %d", r.Status)
	}
}

func TestValidateKey(t *testing.T) {
	c := &idemhttptest.Counting{}
	uuidLike := func(k string) error {
		if len(k) != 36 || strings.Count(k, "-") != 4 {
			return errors.New("the key must be a UUID")
		}
		return nil
	}
	srv := idemhttptest.Server(t, newStore(), idemhttp.Options{ValidateKey: uuidLike}, c)
	r := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "1")
	if r.Status != http.StatusBadRequest || r.Problem(t).Detail != "the key must be a UUID" || r.Header.Get("Content-Language") != "en" {
		t.Fatalf("low-entropy key: %d %s", r.Status, r.Body)
	}
	if r := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, `"8e03978e-40d5-43e8-bc93-6894a57f9324"`); r.Status != http.StatusCreated {
		t.Fatalf("UUID key: %d %s", r.Status, r.Body)
	}
}

func TestOptionalKeyAndBody(t *testing.T) {
	c := &idemhttptest.Counting{}
	srv := idemhttptest.Server(t, newStore(), idemhttp.Options{}, c)
	post(t, srv.URL, "x", "X-User", "u")
	post(t, srv.URL, "x", "X-User", "u")
	if c.Calls.Load() != 2 {
		t.Fatalf("unkeyed requests ran %d times, want 2 (no dedup without a key)", c.Calls.Load())
	}
	// The handler reads the body the middleware buffered; a quoted and a bare
	// key are the same key.
	r := post(t, srv.URL, "hello body", "X-User", "u", idemhttp.HeaderKey, `"q\"k"`)
	if !strings.Contains(r.Body, `"body":"hello body"`) {
		t.Fatalf("handler saw %s", r.Body)
	}
	if r2 := post(t, srv.URL, "hello body", "X-User", "u", idemhttp.HeaderKey, `q"k`); !r2.Replayed() || r2.Body != r.Body {
		t.Fatalf("bare form of the key not replayed: %d %s", r2.Status, r2.Body)
	}
}

func TestReplayHeaderAllowList(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/orders/7")
		w.Header().Set("Set-Cookie", "session=secret")
		w.Header().Set("X-Internal", "debug")
		w.WriteHeader(http.StatusAccepted)
		w.Header().Set("Location", "/changed-after-writeheader")
		_, _ = w.Write([]byte(`{}`))
	})
	for _, tc := range []struct {
		replay     []string
		wantCookie bool
	}{{nil, false}, {append([]string{"set-cookie"}, idemhttp.DefaultReplayHeaders...), true}} {
		srv := idemhttptest.Server(t, newStore(), idemhttp.Options{ReplayHeaders: tc.replay}, h)
		first := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k")
		r := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k")
		if !r.Replayed() || r.Status != http.StatusAccepted || r.Body != "{}" || first.Replayed() {
			t.Fatalf("replay %d %q", r.Status, r.Body)
		}
		if r.Header.Get("Location") != "/orders/7" || r.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("allowed headers not replayed: %v", r.Header)
		}
		if r.Header.Get("X-Internal") != "" {
			t.Fatal("header outside the allow-list replayed")
		}
		if got := r.Header.Get("Set-Cookie") != ""; got != tc.wantCookie {
			t.Fatalf("Set-Cookie replayed=%v, want %v", got, tc.wantCookie)
		}
	}
}

func TestServerErrorPolicy(t *testing.T) {
	for _, record := range []bool{false, true} {
		var calls atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) == 1 {
				http.Error(w, "db down", http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
		})
		srv := idemhttptest.Server(t, newStore(), idemhttp.Options{Record5xx: record}, h)
		first := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k")
		second := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k")
		third := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k")
		if first.Status != 500 {
			t.Fatalf("first %d", first.Status)
		}
		if record {
			if second.Status != 500 || !second.Replayed() || second.Body != "db down\n" || calls.Load() != 1 {
				t.Fatalf("Record5xx: second %d replayed=%v calls=%d", second.Status, second.Replayed(), calls.Load())
			}
		} else {
			if second.Status != 201 || second.Replayed() || third.Status != 201 || !third.Replayed() || calls.Load() != 2 {
				t.Fatalf("release on 5xx: second %d/%v third %d/%v calls %d",
					second.Status, second.Replayed(), third.Status, third.Replayed(), calls.Load())
			}
		}
	}
}

func TestStoreDown(t *testing.T) {
	c := &idemhttptest.Counting{}
	srv := idemhttptest.Server(t, downStore{newStore()}, idemhttp.Options{}, c)
	r := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k")
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" ||
		r.Problem(t).Type != idemhttp.ProblemUnavailable || c.Calls.Load() != 0 {
		t.Fatalf("store down: %d %v calls %d", r.Status, r.Header, c.Calls.Load())
	}
}

// A panicking handler releases the key: the retry runs the handler again.
func TestPanicReleases(t *testing.T) {
	var calls atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			panic(http.ErrAbortHandler) // net/http closes the connection quietly
		}
		w.WriteHeader(http.StatusCreated)
	})
	srv := idemhttptest.Server(t, newStore(), idemhttp.Options{}, h)
	req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
	req.Header.Set("X-User", "u")
	req.Header.Set(idemhttp.HeaderKey, "k")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the panicking request got %d, want a broken connection", resp.StatusCode)
	}
	if r := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k"); r.Status != 201 || r.Replayed() || calls.Load() != 2 {
		t.Fatalf("retry after panic: %d replayed=%v calls=%d", r.Status, r.Replayed(), calls.Load())
	}
}

func TestResponseTooLargeToRecord(t *testing.T) {
	big := strings.Repeat("x", 100)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(big[:50]))
		_, _ = w.Write([]byte(big[50:]))
	})
	srv := idemhttptest.Server(t, newStore(), idemhttp.Options{MaxResponseSize: 64}, h)
	if r := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k"); r.Body != big {
		t.Fatalf("first client got %d bytes, want the whole %d", len(r.Body), len(big))
	}
	r := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k")
	if r.Status != http.StatusGone || r.Problem(t).Type != idemhttp.ProblemNotReplayable {
		t.Fatalf("retry of an unrecorded response: %d %s", r.Status, r.Body)
	}
}

func TestAnonymous(t *testing.T) {
	c := &idemhttptest.Counting{}
	srv := idemhttptest.Server(t, newStore(), idemhttp.Options{AllowAnonymous: true}, c)
	post(t, srv.URL, "", idemhttp.HeaderKey, "k")
	if r := post(t, srv.URL, "", idemhttp.HeaderKey, "k"); !r.Replayed() || c.Calls.Load() != 1 {
		t.Fatalf("anonymous retry: replayed=%v calls=%d", r.Replayed(), c.Calls.Load())
	}
}

func TestOptionsValidation(t *testing.T) {
	for name, o := range map[string]idemhttp.Options{
		"no scope":     {Principal: idemhttptest.UserPrincipal},
		"no principal": {Scope: "s"},
		"negative":     {Scope: "s", Principal: idemhttptest.UserPrincipal, MaxBodySize: -1},
		"bad guard":    {Scope: "s", Principal: idemhttptest.UserPrincipal, Guard: idem.Options{Lease: -1}},
		"reconcile": {Scope: "s", Principal: idemhttptest.UserPrincipal, Guard: idem.Options{Stale: idem.StaleReconcile,
			Reconcile: func(context.Context, idem.Record) ([]byte, bool, error) { return nil, true, nil }}},
	} {
		if _, err := idemhttp.New(newStore(), o); !errors.Is(err, idem.ErrInvalidOptions) {
			t.Errorf("%s: err %v, want ErrInvalidOptions", name, err)
		}
	}
}

// An in-progress record whose lease ended (its server crashed mid-request) is
// retaken by default, and parked for an operator with StalePark.
func TestStaleRecord(t *testing.T) {
	for _, park := range []bool{false, true} {
		store := newStore()
		now := time.Now()
		// What a crashed server leaves: alice's key "k", in progress, lease over.
		_, err := store.Claim(context.Background(), idem.ClaimRequest{
			Key: idem.Key{Scope: "test", ID: "alice|k"}, Now: now.Add(-time.Hour),
			LeaseUntil: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour),
		})
		if err != nil {
			t.Fatal(err)
		}
		opts := idemhttp.Options{}
		if park {
			opts.Guard.Stale = idem.StalePark
		}
		c := &idemhttptest.Counting{}
		srv := idemhttptest.Server(t, store, opts, c)
		r := post(t, srv.URL, "", "X-User", "alice", idemhttp.HeaderKey, "k")
		switch {
		case park && (r.Status != http.StatusConflict || r.Problem(t).Type != idemhttp.ProblemStale || c.Calls.Load() != 0):
			t.Fatalf("parked: %d %s calls %d", r.Status, r.Body, c.Calls.Load())
		case !park && (r.Status != http.StatusCreated || c.Calls.Load() != 1):
			t.Fatalf("retaken: %d %s calls %d", r.Status, r.Body, c.Calls.Load())
		}
	}
}
