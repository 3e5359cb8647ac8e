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

// TestClientDisconnect: the client gives up while the handler runs. The
// handler sees its context cancelled; what it answers anyway is recorded, so
// the client's retry gets the outcome instead of running the work again.
func TestClientDisconnect(t *testing.T) {
	started := make(chan struct{})
	events := make(chan idem.Event, 4)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done() // the server noticed the client leave
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("done anyway"))
	})
	srv := idemhttptest.Server(t, newStore(), idemhttp.Options{Guard: idem.Options{
		Observer: idem.ObserverFunc(func(_ context.Context, e idem.Event) { events <- e }),
	}}, h)

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("{}"))
	req.Header.Set("X-User", "u")
	req.Header.Set(idemhttp.HeaderKey, "k")
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v, want context.Canceled", err)
	}
	if e := <-events; e.Outcome != idem.OutcomeProcessed {
		t.Fatalf("outcome %v (%v), want processed", e.Outcome, e.Err)
	}
	r := post(t, srv.URL, "{}", "X-User", "u", idemhttp.HeaderKey, "k")
	if r.Status != http.StatusCreated || !r.Replayed() || r.Body != "done anyway" {
		t.Fatalf("retry: %d %q replayed=%v", r.Status, r.Body, r.Replayed())
	}
}

// A handler that hijacks the connection answers the client itself; nothing
// can be recorded, so the key is released and a retry runs it again.
func TestHijackReleases(t *testing.T) {
	var calls atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 201 Created\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		_ = buf.Flush()
	})
	events := make(chan idem.Event, 2)
	srv := idemhttptest.Server(t, newStore(), idemhttp.Options{Guard: idem.Options{
		Observer: idem.ObserverFunc(func(_ context.Context, e idem.Event) { events <- e }),
	}}, h)
	for i := range 2 {
		if r := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k"); r.Status != http.StatusCreated || r.Replayed() {
			t.Fatalf("request %d: %d replayed=%v", i, r.Status, r.Replayed())
		}
		// The client has its answer as soon as the handler flushes it; the
		// middleware releases the key after the handler returns.
		if e := <-events; e.Outcome == idem.OutcomeProcessed || e.Outcome == idem.OutcomeDuplicate {
			t.Fatalf("request %d: outcome %v, want the key released", i, e.Outcome)
		}
	}
	if calls.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2", calls.Load())
	}
}

// Informational responses pass through unrecorded; streamed bodies are
// flushed to the client and recorded whole.
func TestEarlyHintsAndFlush(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("part1 "))
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Error(err)
		}
		_, _ = w.Write([]byte("part2"))
	})
	srv := idemhttptest.Server(t, newStore(), idemhttp.Options{}, h)
	first := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k")
	again := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k")
	if first.Status != 200 || first.Body != "part1 part2" || again.Status != 200 || again.Body != first.Body || !again.Replayed() {
		t.Fatalf("first %d %q, replay %d %q", first.Status, first.Body, again.Status, again.Body)
	}
}

// fakeClock is the guard's clock in tests that move time.
type fakeClock struct{ now atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.now.Load()).UTC() }
func (c *fakeClock) Advance(d time.Duration) { c.now.Add(int64(d)) }

// Keys are replayed for the retention and forgotten after it.
func TestRetention(t *testing.T) {
	clock := newFakeClock()
	c := &idemhttptest.Counting{}
	srv := idemhttptest.Server(t, newStore(), idemhttp.Options{Guard: idem.Options{Clock: clock.Now, Retention: time.Hour}}, c)
	post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k")
	clock.Advance(59 * time.Minute)
	if r := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k"); !r.Replayed() {
		t.Fatal("not replayed within the retention")
	}
	clock.Advance(time.Minute)
	if r := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k"); r.Replayed() || c.Calls.Load() != 2 {
		t.Fatalf("after the retention: replayed=%v calls=%d", r.Replayed(), c.Calls.Load())
	}
}

// completeFails accepts claims but cannot complete them, like a database
// that went down while the handler ran.
type completeFails struct{ idem.Store }

func (completeFails) Complete(context.Context, idem.CompleteRequest) error {
	return errors.New("connection reset")
}

// When the record cannot be completed, the client still has its response;
// retries get 409 until the lease ends, then run the handler again, as after
// a crash.
func TestCompleteFails(t *testing.T) {
	clock := newFakeClock()
	c := &idemhttptest.Counting{}
	srv := idemhttptest.Server(t, completeFails{newStore()}, idemhttp.Options{Guard: idem.Options{Clock: clock.Now, Lease: time.Minute}}, c)
	if r := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k"); r.Status != http.StatusCreated {
		t.Fatalf("first: %d", r.Status)
	}
	if r := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k"); r.Status != http.StatusConflict {
		t.Fatalf("within the lease: %d, want 409", r.Status)
	}
	clock.Advance(time.Minute)
	if r := post(t, srv.URL, "", "X-User", "u", idemhttp.HeaderKey, "k"); r.Status != http.StatusCreated || c.Calls.Load() != 2 {
		t.Fatalf("after the lease: %d calls %d", r.Status, c.Calls.Load())
	}
}
