package idemhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp"
	"github.com/idemgo/idem/idemhttp/internal/idemhttptest"
)

// echoKey answers with the Idempotency-Key it received.
var echoKey = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = w.Write([]byte(r.Header.Get(idemhttp.HeaderKey)))
})

func TestTransportDerivesStableKeys(t *testing.T) {
	srv := httptest.NewServer(echoKey)
	defer srv.Close()
	client := &http.Client{Transport: &idemhttp.Transport{}}
	msg := idem.ContextWithKey(context.Background(), idem.Key{Scope: "billing", ID: "order-42"})
	send := func(ctx context.Context, method, path string, header ...string) string {
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader("{}"))
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}

	first := send(msg, http.MethodPost, "/charges")
	if first == "" || send(msg, http.MethodPost, "/charges") != first {
		t.Fatalf("keys for one message and call differ or are missing: %q", first)
	}
	key, err := idemhttp.ParseKey(first)
	if err != nil || !strings.HasPrefix(key, "idem-") {
		t.Fatalf("sent %q: %v", first, err)
	}
	// A redelivery of the message (a new context with the same key) sends the same key.
	again := idem.ContextWithKey(context.Background(), idem.Key{Scope: "billing", ID: "order-42"})
	if send(again, http.MethodPost, "/charges") != first {
		t.Fatal("redelivery derived another key")
	}
	for name, got := range map[string]string{
		"other path":    send(msg, http.MethodPost, "/refunds"),
		"other method":  send(msg, http.MethodPatch, "/charges"),
		"other message": send(idem.ContextWithKey(context.Background(), idem.Key{Scope: "billing", ID: "order-43"}), http.MethodPost, "/charges"),
	} {
		if got == "" || got == first {
			t.Errorf("%s: key %q, want a different non-empty key", name, got)
		}
	}
	for name, got := range map[string]string{
		"GET":        send(msg, http.MethodGet, "/charges"),
		"no message": send(context.Background(), http.MethodPost, "/charges"),
	} {
		if got != "" {
			t.Errorf("%s: key %q set, want none", name, got)
		}
	}
	if got := send(msg, http.MethodPost, "/charges", idemhttp.HeaderKey, "mine"); got != "mine" {
		t.Errorf("existing header replaced by %q", got)
	}

	bare := &http.Client{Transport: &idemhttp.Transport{Bare: true, Name: func(*http.Request) string { return "charge" }}}
	req, _ := http.NewRequestWithContext(msg, http.MethodPost, srv.URL+"/x", nil)
	resp, err := bare.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := idem.DeriveKey(msg, "charge"); string(b) != want {
		t.Fatalf("bare named key %q, want %q", b, want)
	}
}

// TestTransportEndToEnd processes one message twice (a redelivery) calling an
// API behind the middleware: the API runs the charge once and replays it.
func TestTransportEndToEnd(t *testing.T) {
	var charges atomic.Int64
	api := idemhttptest.Server(t, newStore(), idemhttp.Options{AllowAnonymous: true, Required: true},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			charges.Add(1)
			w.WriteHeader(http.StatusCreated)
		}))
	client := &http.Client{Transport: &idemhttp.Transport{}}
	g, err := idem.New(newStore(), idem.Options{Scope: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	attempts := 0
	handle := func(ctx context.Context) ([]byte, error) {
		attempts++
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, api.URL+"/charges", strings.NewReader(`{"amount":1}`))
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		resp.Body.Close()
		switch {
		case resp.StatusCode != http.StatusCreated:
			return nil, fmt.Errorf("charge: status %d", resp.StatusCode)
		case attempts == 1:
			return nil, errors.New("failed after the charge") // as a crash would
		case resp.Header.Get(idemhttp.HeaderReplayed) != "true":
			return nil, errors.New("the redelivery's charge was not deduplicated")
		}
		return nil, nil
	}
	msg := idem.Message{ID: "order-42", Payload: []byte("{}")}
	if _, err := g.Do(context.Background(), msg, handle); err == nil {
		t.Fatal("first attempt should fail after the charge")
	}
	res, err := g.Do(context.Background(), msg, handle)
	if err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("redelivery: %v %v", res.Outcome, err)
	}
	if charges.Load() != 1 {
		t.Fatalf("charged %d times, want 1", charges.Load())
	}
}
