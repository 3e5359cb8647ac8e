package idemhttp_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp"
)

// concurrentClient keeps enough idle connections for 100 parallel requests.
func concurrentClient(t *testing.T) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 100
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func parallel(t *testing.T, n int, client *http.Client, url, key string) []reply {
	var wg sync.WaitGroup
	out := make([]reply, n)
	for i := range n {
		wg.Go(func() {
			var err error
			if out[i], err = tryDo(client, http.MethodPost, url, `{"amount":100}`, "X-User", "alice", idemhttp.HeaderKey, key); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	return out
}

// TestConcurrentRequestsRunOnce holds the first request's handler until the
// 99 others have been answered: they must all be 409. Then the first
// completes, and 100 more requests all get the replay.
func TestConcurrentRequestsRunOnce(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) { testConcurrentRequestsRunOnce(t, st.open(t)) })
	}
}

func testConcurrentRequestsRunOnce(t *testing.T, store idem.Store) {
	var calls atomic.Int64
	hold := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		<-hold
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("charged"))
	})
	srv := server(t, store, idemhttp.Options{}, h)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(hold) }) }) // before srv.Close, which waits for handlers
	client := concurrentClient(t)

	replies := make(chan reply, 100)
	for range 100 {
		go func() {
			r, err := tryDo(client, http.MethodPost, srv.URL, `{"amount":100}`, "X-User", "alice", idemhttp.HeaderKey, `"k1"`)
			if err != nil {
				t.Error(err)
			}
			replies <- r
		}()
	}
	for range 99 {
		r := <-replies
		if r.status != http.StatusConflict {
			t.Fatalf("while the first runs: status %d %s, want 409", r.status, r.body)
		}
		if p := r.problem(t); p.Type != idemhttp.ProblemInProgress {
			t.Fatalf("409 type %q", p.Type)
		}
		if r.header.Get("Retry-After") != "1" {
			t.Fatalf("409 without Retry-After: %v", r.header)
		}
	}
	once.Do(func() { close(hold) })
	first := <-replies
	if first.status != http.StatusCreated || first.body != "charged" || first.replayed() {
		t.Fatalf("first: %d %q replayed=%v", first.status, first.body, first.replayed())
	}

	for _, r := range parallel(t, 100, client, srv.URL, `"k1"`) {
		if r.status != http.StatusCreated || r.body != "charged" || !r.replayed() ||
			r.header.Get("Content-Type") != "text/plain" {
			t.Fatalf("after completion: %d %q %v", r.status, r.body, r.header)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

// TestConcurrentRequestsUnsynchronised lets 100 requests race freely: one runs
// the handler, every other one sees 409 or the replay.
func TestConcurrentRequestsUnsynchronised(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) { testConcurrentRequestsUnsynchronised(t, st.open(t)) })
	}
}

func testConcurrentRequestsUnsynchronised(t *testing.T, store idem.Store) {
	c := &counting{}
	srv := server(t, store, idemhttp.Options{}, c)
	var fresh, replayed, conflicts int
	for _, r := range parallel(t, 100, concurrentClient(t), srv.URL, "k2") {
		switch {
		case r.status == http.StatusCreated && !r.replayed():
			fresh++
		case r.status == http.StatusCreated:
			replayed++
			if !strings.Contains(r.body, `"run":1`) {
				t.Fatalf("replay of another run: %s", r.body)
			}
		case r.status == http.StatusConflict:
			conflicts++
		default:
			t.Fatalf("unexpected %d %s", r.status, r.body)
		}
	}
	if fresh != 1 || c.calls.Load() != 1 {
		t.Fatalf("fresh=%d calls=%d, want 1 and 1", fresh, c.calls.Load())
	}
	t.Logf("1 run, %d replays, %d conflicts", replayed, conflicts)
}

func TestPrincipalsNeverShareResponses(t *testing.T) {
	c := &counting{}
	srv := server(t, newStore(), idemhttp.Options{}, c)
	a := post(t, srv.URL, "same", "X-User", "alice", idemhttp.HeaderKey, "shared")
	b := post(t, srv.URL, "same", "X-User", "bob", idemhttp.HeaderKey, "shared")
	if a.replayed() || b.replayed() || c.calls.Load() != 2 {
		t.Fatalf("two principals with one key: replayed %v/%v, calls %d", a.replayed(), b.replayed(), c.calls.Load())
	}
	// Without escaping, ("alice", "shared|x") and ("alice|shared", "x") would
	// both be stored as "alice|shared|x".
	post(t, srv.URL, "same", "X-User", "alice", idemhttp.HeaderKey, "shared|x")
	if e := post(t, srv.URL, "same", "X-User", "alice|shared", idemhttp.HeaderKey, "x"); e.replayed() {
		t.Fatal("a principal containing the separator collided with another principal's key")
	}
	if c.calls.Load() != 4 {
		t.Fatalf("calls %d, want 4", c.calls.Load())
	}
	for user, want := range map[string]reply{"alice": a, "bob": b} {
		r := post(t, srv.URL, "same", "X-User", user, idemhttp.HeaderKey, "shared")
		if !r.replayed() || r.body != want.body || !strings.Contains(r.body, `"user":"`+user+`"`) {
			t.Fatalf("%s's retry got %s, want %s", user, r.body, want.body)
		}
	}
}

func TestFingerprintMismatch(t *testing.T) {
	c := &counting{}
	srv := server(t, newStore(), idemhttp.Options{FingerprintHeaders: []string{"X-Api-Version"}}, c)
	post(t, srv.URL+"/pay?x=1", "a", "X-User", "u", idemhttp.HeaderKey, "k", "X-Api-Version", "1")
	for name, r := range map[string]reply{
		"body":   post(t, srv.URL+"/pay?x=1", "b", "X-User", "u", idemhttp.HeaderKey, "k", "X-Api-Version", "1"),
		"path":   post(t, srv.URL+"/other?x=1", "a", "X-User", "u", idemhttp.HeaderKey, "k", "X-Api-Version", "1"),
		"query":  post(t, srv.URL+"/pay?x=2", "a", "X-User", "u", idemhttp.HeaderKey, "k", "X-Api-Version", "1"),
		"header": post(t, srv.URL+"/pay?x=1", "a", "X-User", "u", idemhttp.HeaderKey, "k", "X-Api-Version", "2"),
		"method": do(t, http.DefaultClient, http.MethodPatch, srv.URL+"/pay?x=1", "a", "X-User", "u", idemhttp.HeaderKey, "k", "X-Api-Version", "1"),
	} {
		if r.status != http.StatusUnprocessableEntity || r.problem(t).Type != idemhttp.ProblemKeyReused {
			t.Fatalf("changed %s: %d %s, want 422", name, r.status, r.body)
		}
	}
	if c.calls.Load() != 1 {
		t.Fatalf("calls %d", c.calls.Load())
	}
	if r := post(t, srv.URL+"/pay?x=1", "a", "X-User", "u", idemhttp.HeaderKey, "k", "X-Api-Version", "1"); !r.replayed() {
		t.Fatalf("identical retry not replayed: %d", r.status)
	}
}

func TestBadRequests(t *testing.T) {
	c := &counting{}
	srv := server(t, newStore(), idemhttp.Options{Required: true, MaxBodySize: 10}, c)
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
			if r.status != tc.status {
				t.Fatalf("status %d %s, want %d", r.status, r.body, tc.status)
			}
			if p := r.problem(t); p.Type != tc.typ || p.Detail == "" {
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
	if c.calls.Load() != 0 {
		t.Fatalf("handler ran %d times on bad requests", c.calls.Load())
	}
	// Methods not covered pass through without a key.
	if r := do(t, http.DefaultClient, http.MethodPut, srv.URL, "", "X-User", "u"); r.status != http.StatusCreated {
		t.Fatalf("PUT: %d", r.status)
	}
}

func TestValidateKey(t *testing.T) {
	c := &counting{}
	uuidLike := func(k string) error {
		if len(k) != 36 || strings.Count(k, "-") != 4 {
			return errors.New("the key must be a UUID")
		}
		return nil
	}
	srv := server(t, newStore(), idemhttp.Options{ValidateKey: uuidLike}, c)
	r := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "1")
	if r.status != http.StatusBadRequest || r.problem(t).Detail != "the key must be a UUID" || r.header.Get("Content-Language") != "en" {
		t.Fatalf("low-entropy key: %d %s", r.status, r.body)
	}
	if r := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, `"8e03978e-40d5-43e8-bc93-6894a57f9324"`); r.status != http.StatusCreated {
		t.Fatalf("UUID key: %d %s", r.status, r.body)
	}
}

func TestOptionalKeyAndBody(t *testing.T) {
	c := &counting{}
	srv := server(t, newStore(), idemhttp.Options{}, c)
	post(t, srv.URL, "x", "X-User", "u")
	post(t, srv.URL, "x", "X-User", "u")
	if c.calls.Load() != 2 {
		t.Fatalf("unkeyed requests ran %d times, want 2 (no dedup without a key)", c.calls.Load())
	}
	// The handler reads the body the middleware buffered; a quoted and a bare
	// key are the same key.
	r := post(t, srv.URL, "hello body", "X-User", "u", idemhttp.HeaderKey, `"q\"k"`)
	if !strings.Contains(r.body, `"body":"hello body"`) {
		t.Fatalf("handler saw %s", r.body)
	}
	if r2 := post(t, srv.URL, "hello body", "X-User", "u", idemhttp.HeaderKey, `q"k`); !r2.replayed() || r2.body != r.body {
		t.Fatalf("bare form of the key not replayed: %d %s", r2.status, r2.body)
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
		srv := server(t, newStore(), idemhttp.Options{ReplayHeaders: tc.replay}, h)
		first := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k")
		r := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k")
		if !r.replayed() || r.status != http.StatusAccepted || r.body != "{}" || first.replayed() {
			t.Fatalf("replay %d %q", r.status, r.body)
		}
		if r.header.Get("Location") != "/orders/7" || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("allowed headers not replayed: %v", r.header)
		}
		if r.header.Get("X-Internal") != "" {
			t.Fatal("header outside the allow-list replayed")
		}
		if got := r.header.Get("Set-Cookie") != ""; got != tc.wantCookie {
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
		srv := server(t, newStore(), idemhttp.Options{Record5xx: record}, h)
		first := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k")
		second := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k")
		third := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k")
		if first.status != 500 {
			t.Fatalf("first %d", first.status)
		}
		if record {
			if second.status != 500 || !second.replayed() || second.body != "db down\n" || calls.Load() != 1 {
				t.Fatalf("Record5xx: second %d replayed=%v calls=%d", second.status, second.replayed(), calls.Load())
			}
		} else {
			if second.status != 201 || second.replayed() || third.status != 201 || !third.replayed() || calls.Load() != 2 {
				t.Fatalf("release on 5xx: second %d/%v third %d/%v calls %d",
					second.status, second.replayed(), third.status, third.replayed(), calls.Load())
			}
		}
	}
}

func TestStoreDown(t *testing.T) {
	c := &counting{}
	srv := server(t, downStore{newStore()}, idemhttp.Options{}, c)
	r := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k")
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" ||
		r.problem(t).Type != idemhttp.ProblemUnavailable || c.calls.Load() != 0 {
		t.Fatalf("store down: %d %v calls %d", r.status, r.header, c.calls.Load())
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
	srv := server(t, newStore(), idemhttp.Options{}, h)
	req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
	req.Header.Set("X-User", "u")
	req.Header.Set(idemhttp.HeaderKey, "k")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the panicking request got %d, want a broken connection", resp.StatusCode)
	}
	if r := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k"); r.status != 201 || r.replayed() || calls.Load() != 2 {
		t.Fatalf("retry after panic: %d replayed=%v calls=%d", r.status, r.replayed(), calls.Load())
	}
}

func TestResponseTooLargeToRecord(t *testing.T) {
	big := strings.Repeat("x", 100)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(big[:50]))
		_, _ = w.Write([]byte(big[50:]))
	})
	srv := server(t, newStore(), idemhttp.Options{MaxResponseSize: 64}, h)
	if r := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k"); r.body != big {
		t.Fatalf("first client got %d bytes, want the whole %d", len(r.body), len(big))
	}
	r := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k")
	if r.status != http.StatusGone || r.problem(t).Type != idemhttp.ProblemNotReplayable {
		t.Fatalf("retry of an unrecorded response: %d %s", r.status, r.body)
	}
}

func TestAnonymous(t *testing.T) {
	c := &counting{}
	srv := server(t, newStore(), idemhttp.Options{AllowAnonymous: true}, c)
	post(t, srv.URL, "", idemhttp.HeaderKey, "k")
	if r := post(t, srv.URL, "", idemhttp.HeaderKey, "k"); !r.replayed() || c.calls.Load() != 1 {
		t.Fatalf("anonymous retry: replayed=%v calls=%d", r.replayed(), c.calls.Load())
	}
}

func TestOptionsValidation(t *testing.T) {
	for name, o := range map[string]idemhttp.Options{
		"no scope":     {Principal: userPrincipal},
		"no principal": {Scope: "s"},
		"negative":     {Scope: "s", Principal: userPrincipal, MaxBodySize: -1},
		"bad guard":    {Scope: "s", Principal: userPrincipal, Guard: idem.Options{Lease: -1}},
		"reconcile": {Scope: "s", Principal: userPrincipal, Guard: idem.Options{Stale: idem.StaleReconcile,
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
		c := &counting{}
		srv := server(t, store, opts, c)
		r := post(t, srv.URL, "", "X-User", "alice", idemhttp.HeaderKey, "k")
		switch {
		case park && (r.status != http.StatusConflict || r.problem(t).Type != idemhttp.ProblemStale || c.calls.Load() != 0):
			t.Fatalf("parked: %d %s calls %d", r.status, r.body, c.calls.Load())
		case !park && (r.status != http.StatusCreated || c.calls.Load() != 1):
			t.Fatalf("retaken: %d %s calls %d", r.status, r.body, c.calls.Load())
		}
	}
}
