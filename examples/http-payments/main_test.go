package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgo/idem/idemhttp"
)

type response struct {
	status   int
	replayed string
	location string
	body     string
}

func post(t *testing.T, url, user, key, body string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/payments", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.Header.Set("Authorization", "Bearer "+user)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", idemhttp.FormatKey(key))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header.Get(idemhttp.HeaderReplayed), resp.Header.Get("Location"), string(b)}
}

func TestPayments(t *testing.T) {
	ctx := context.Background()
	a, err := newApp(ctx, config{DBPath: filepath.Join(t.TempDir(), "payments.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	srv := httptest.NewServer(a.Handler)
	defer srv.Close()

	const key = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	const body = `{"amount_cents":1500,"currency":"EUR"}`

	first := post(t, srv.URL, "alice", key, body)
	if first.status != http.StatusCreated || first.replayed != "" || first.location == "" {
		t.Fatalf("first POST: %+v", first)
	}

	// The client did not see the answer and retries: same response, replayed.
	retry := post(t, srv.URL, "alice", key, body)
	if retry.status != first.status || retry.body != first.body || retry.location != first.location || retry.replayed != "true" {
		t.Errorf("retry: %+v, want the first response %+v replayed", retry, first)
	}

	// The same key for another payment is a client bug: 422, nothing paid.
	if changed := post(t, srv.URL, "alice", key, `{"amount_cents":9900,"currency":"EUR"}`); changed.status != http.StatusUnprocessableEntity {
		t.Errorf("changed body: %+v, want 422", changed)
	}

	// Bob happens to use the same key: his own payment, not Alice's response.
	bob := post(t, srv.URL, "bob", key, body)
	if bob.status != http.StatusCreated || bob.replayed != "" || bob.location == first.location {
		t.Errorf("bob: %+v, want a new payment (alice's is %s)", bob, first.location)
	}

	if r := post(t, srv.URL, "alice", "", body); r.status != http.StatusBadRequest {
		t.Errorf("no key: %+v, want 400", r)
	}
	if r := post(t, srv.URL, "", "other-key", body); r.status != http.StatusUnauthorized {
		t.Errorf("no caller: %+v, want 401", r)
	}

	rows, err := a.store.DB().QueryContext(ctx, `SELECT user_id, amount_cents FROM payments ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var user, amount string
		if err := rows.Scan(&user, &amount); err != nil {
			t.Fatal(err)
		}
		got = append(got, user+":"+amount)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "alice:1500,bob:1500" {
		t.Errorf("payments %v, want one for alice and one for bob", got)
	}
}
