package idemhttp_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp"
	"github.com/idemgo/idem/idemhttp/internal/idemhttptest"
)

func webhookServer(t *testing.T, store idem.Store, opts idemhttp.WebhookOptions, h http.Handler) *httptest.Server {
	t.Helper()
	rx, err := idemhttp.Webhook(store, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rx.Wrap(h))
	t.Cleanup(srv.Close)
	return srv
}

// githubSignature computes X-Hub-Signature-256 the way GitHub does.
func githubSignature(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

func TestWebhookGitHubDeliveries(t *testing.T) {
	secret := []byte("s3cret")
	verify := func(r *http.Request, body []byte) error {
		if !hmac.Equal([]byte(r.Header.Get("X-Hub-Signature-256")), []byte(githubSignature(secret, body))) {
			return errors.New("bad signature")
		}
		return nil
	}
	var calls atomic.Int64
	fail := atomic.Bool{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if fail.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	store := newStore()
	srv := webhookServer(t, store, idemhttp.WebhookOptions{Sender: "github", IDHeader: "X-GitHub-Delivery", Verify: verify}, h)
	body := `{"action":"opened"}`
	sig := githubSignature(secret, []byte(body))
	deliver := func(id, body, sig string) idemhttptest.Reply {
		return post(t, srv.URL, body, "X-GitHub-Delivery", id, "X-Hub-Signature-256", sig, "Content-Type", "application/json")
	}

	// A forged delivery claims nothing: the real one still runs.
	if r := deliver("d1", body, "sha256=00"); r.Status != http.StatusUnauthorized || r.Problem(t).Type != idemhttp.ProblemWebhookUnverified {
		t.Fatalf("forged: %d %s", r.Status, r.Body)
	}
	if r := deliver("d1", body, sig); r.Status != http.StatusAccepted || r.Replayed() {
		t.Fatalf("first delivery: %d replayed=%v", r.Status, r.Replayed())
	}
	if r := deliver("d1", body, sig); r.Status != http.StatusOK || !r.Replayed() {
		t.Fatalf("redelivery: %d replayed=%v", r.Status, r.Replayed())
	}
	if calls.Load() != 1 {
		t.Fatalf("handler ran %d times", calls.Load())
	}
	// The same id with another body is a conflict, never a silent drop.
	other := `{"action":"closed"}`
	if r := deliver("d1", other, githubSignature(secret, []byte(other))); r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("changed body: %d", r.Status)
	}
	// A failing handler releases the id: the sender's redelivery runs it again.
	fail.Store(true)
	if r := deliver("d2", body, sig); r.Status != http.StatusInternalServerError {
		t.Fatalf("failing delivery: %d", r.Status)
	}
	fail.Store(false)
	if r := deliver("d2", body, sig); r.Status != http.StatusAccepted || r.Replayed() {
		t.Fatalf("redelivery after failure: %d replayed=%v", r.Status, r.Replayed())
	}
	if calls.Load() != 3 {
		t.Fatalf("handler ran %d times, want 3", calls.Load())
	}
	if r := deliver("", body, sig); r.Status != http.StatusBadRequest || r.Problem(t).Type != idemhttp.ProblemWebhookNoID {
		t.Fatalf("no delivery id: %d", r.Status)
	}
	// Keys are scoped by sender.
	if _, err := store.Get(t.Context(), idem.Key{Scope: "webhook/github", ID: "d1"}); err != nil {
		t.Fatalf("record under webhook/github: %v", err)
	}
}

func TestWebhookStripeEventID(t *testing.T) {
	var calls atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) })
	store := newStore()
	srv := webhookServer(t, store, idemhttp.WebhookOptions{Sender: "stripe", Key: idem.JSONFieldsKey("id")}, h)
	evt := `{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","type":"payment_intent.succeeded"}`
	for i, want := range []bool{false, true, true} {
		r := post(t, srv.URL, evt, "Content-Type", "application/json")
		if r.Status != http.StatusOK || r.Replayed() != want {
			t.Fatalf("delivery %d: %d replayed=%v", i, r.Status, r.Replayed())
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("handler ran %d times", calls.Load())
	}
	if r := post(t, srv.URL, `{"type":"x"}`); r.Status != http.StatusBadRequest {
		t.Fatalf("event without id: %d", r.Status)
	}
	// Another sender's id space is separate.
	gh := webhookServer(t, store, idemhttp.WebhookOptions{Sender: "github", Key: idem.JSONFieldsKey("id")}, h)
	if r := post(t, gh.URL, evt); r.Replayed() || calls.Load() != 2 {
		t.Fatalf("same id from another sender: replayed=%v calls=%d", r.Replayed(), calls.Load())
	}
}

func TestWebhookOptions(t *testing.T) {
	for name, o := range map[string]idemhttp.WebhookOptions{
		"no sender": {IDHeader: "X-Id"},
		"no id":     {Sender: "s"},
		"both":      {Sender: "s", IDHeader: "X-Id", Key: idem.MessageID},
	} {
		if _, err := idemhttp.Webhook(newStore(), o); !errors.Is(err, idem.ErrInvalidOptions) {
			t.Errorf("%s: %v, want ErrInvalidOptions", name, err)
		}
	}
}
