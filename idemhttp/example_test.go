package idemhttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp"
	"github.com/idemgo/idem/store/memory"
)

// A payments endpoint that a client may retry safely: the retry gets the
// first response again, and the charge runs once.
func ExampleNew() {
	store := memory.New() // any idem.Store: sqlite, postgres, mysql, redis
	mw, err := idemhttp.New(store, idemhttp.Options{
		Scope: "payments",
		// The caller's identity, from your authentication middleware.
		Principal: func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil },
		Required:  true,
	})
	if err != nil {
		panic(err)
	}
	charges := 0
	mux := http.NewServeMux()
	mux.Handle("POST /payments", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.Header().Set("Location", fmt.Sprintf("/payments/%d", charges))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, charges)
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":100}`))
		req.Header.Set("X-User", "alice")
		req.Header.Set("Idempotency-Key", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d %s %s replayed=%q\n", resp.StatusCode, resp.Header.Get("Location"), body, resp.Header.Get("Idempotent-Replayed"))
	}
	fmt.Println("charges:", charges)
	// Output:
	// 201 /payments/1 {"charge":1} replayed=""
	// 201 /payments/1 {"charge":1} replayed="true"
	// charges: 1
}

// A GitHub webhook receiver: a redelivered event is acknowledged without
// running the handler again.
func ExampleWebhook() {
	rx, err := idemhttp.Webhook(memory.New(), idemhttp.WebhookOptions{
		Sender:   "github",
		IDHeader: "X-GitHub-Delivery",
		// Verify: check X-Hub-Signature-256 on the body before the id is claimed.
	})
	if err != nil {
		panic(err)
	}
	handled := 0
	srv := httptest.NewServer(rx.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled++
	})))
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"action":"opened"}`))
		req.Header.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Printf("%d replayed=%q\n", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
	}
	fmt.Println("handled:", handled)
	// Output:
	// 200 replayed=""
	// 200 replayed="true"
	// handled: 1
}

// A Stripe-style webhook: the event id is the "id" field of the JSON body.
func ExampleWebhook_jsonEventID() {
	rx, err := idemhttp.Webhook(memory.New(), idemhttp.WebhookOptions{
		Sender: "stripe",
		Key:    idem.JSONFieldsKey("id"),
	})
	if err != nil {
		panic(err)
	}
	_ = rx.Wrap(http.NotFoundHandler()) // mount on your webhook route
	fmt.Println(rx.Guard().Options().Scope)
	// Output: webhook/stripe
}

// Outgoing calls made while a message is processed carry a key derived from
// the message, so the downstream API deduplicates them across redeliveries.
func ExampleTransport() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("API got key:", r.Header.Get("Idempotency-Key") != "")
	}))
	defer api.Close()
	client := &http.Client{Transport: &idemhttp.Transport{}}

	g, err := idem.New(memory.New(), idem.Options{Scope: "billing"})
	if err != nil {
		panic(err)
	}
	_, err = g.Do(context.Background(), idem.Message{ID: "order-42"}, func(ctx context.Context) ([]byte, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, api.URL+"/v1/charges", strings.NewReader(`{"amount":100}`))
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		return nil, resp.Body.Close()
	})
	fmt.Println(err)
	// Output:
	// API got key: true
	// <nil>
}
