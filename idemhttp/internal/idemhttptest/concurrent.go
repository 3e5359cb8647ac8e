package idemhttptest

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp"
	"github.com/idemgo/idem/internal/testenv"
)

// Run runs, as subtests, the middleware's behaviours under concurrent
// requests, which go through the store, each on a store of its own from
// open: idemhttp's tests run them on store/memory,
// idemhttp/internal/integration's on the SQLite store.
func Run(t *testing.T, open func(testing.TB) idem.Store) {
	testenv.RunCases(t, open,
		testenv.Case[idem.Store]{Name: "ConcurrentRequestsRunOnce", Run: concurrentRequestsRunOnce},
		testenv.Case[idem.Store]{Name: "ConcurrentRequestsUnsynchronised", Run: concurrentRequestsUnsynchronised},
	)
}

// concurrentClient keeps enough idle connections for 100 parallel requests.
func concurrentClient(t *testing.T) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 100
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// parallel sends n requests with key at once, as alice, and returns their
// answers.
func parallel(t *testing.T, n int, client *http.Client, url, key string) []Reply {
	var wg sync.WaitGroup
	out := make([]Reply, n)
	for i := range n {
		wg.Go(func() {
			var err error
			if out[i], err = TryDo(client, http.MethodPost, url, `{"amount":100}`, "X-User", "alice", idemhttp.HeaderKey, key); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	return out
}

// concurrentRequestsRunOnce holds the first request's handler until the
// 99 others have been answered: they must all be 409. Then the first
// completes, and 100 more requests all get the replay.
func concurrentRequestsRunOnce(t *testing.T, store idem.Store) {
	var calls atomic.Int64
	hold := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		<-hold
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("charged"))
	})
	srv := Server(t, store, idemhttp.Options{}, h)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(hold) }) }) // before srv.Close, which waits for handlers
	client := concurrentClient(t)

	replies := make(chan Reply, 100)
	for range 100 {
		go func() {
			r, err := TryDo(client, http.MethodPost, srv.URL, `{"amount":100}`, "X-User", "alice", idemhttp.HeaderKey, `"k1"`)
			if err != nil {
				t.Error(err)
			}
			replies <- r
		}()
	}
	for range 99 {
		r := <-replies
		if r.Status != http.StatusConflict {
			t.Fatalf("while the first runs: status %d %s, want 409", r.Status, r.Body)
		}
		if p := r.Problem(t); p.Type != idemhttp.ProblemInProgress {
			t.Fatalf("409 type %q", p.Type)
		}
		if r.Header.Get("Retry-After") != "1" {
			t.Fatalf("409 without Retry-After: %v", r.Header)
		}
	}
	once.Do(func() { close(hold) })
	first := <-replies
	if first.Status != http.StatusCreated || first.Body != "charged" || first.Replayed() {
		t.Fatalf("first: %d %q replayed=%v", first.Status, first.Body, first.Replayed())
	}

	for _, r := range parallel(t, 100, client, srv.URL, `"k1"`) {
		if r.Status != http.StatusCreated || r.Body != "charged" || !r.Replayed() ||
			r.Header.Get("Content-Type") != "text/plain" {
			t.Fatalf("after completion: %d %q %v", r.Status, r.Body, r.Header)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

// concurrentRequestsUnsynchronised lets 100 requests race freely: one runs
// the handler, every other one sees 409 or the replay.
func concurrentRequestsUnsynchronised(t *testing.T, store idem.Store) {
	c := &Counting{}
	srv := Server(t, store, idemhttp.Options{}, c)
	var fresh, replayed, conflicts int
	for _, r := range parallel(t, 100, concurrentClient(t), srv.URL, "k2") {
		switch {
		case r.Status == http.StatusCreated && !r.Replayed():
			fresh++
		case r.Status == http.StatusCreated:
			replayed++
			if !strings.Contains(r.Body, `"run":1`) {
				t.Fatalf("replay of another run: %s", r.Body)
			}
		case r.Status == http.StatusConflict:
			conflicts++
		default:
			t.Fatalf("unexpected %d %s", r.Status, r.Body)
		}
	}
	if fresh != 1 || c.Calls.Load() != 1 {
		t.Fatalf("fresh=%d calls=%d, want 1 and 1", fresh, c.Calls.Load())
	}
	t.Logf("1 run, %d replays, %d conflicts", replayed, conflicts)
}
