package idemhttp_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp"
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
	srv := server(t, newStore(), idemhttp.Options{Guard: idem.Options{
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
	if r.status != http.StatusCreated || !r.replayed() || r.body != "done anyway" {
		t.Fatalf("retry: %d %q replayed=%v", r.status, r.body, r.replayed())
	}
}
