// Package idempromtest holds what idemprom's tests and the ops checks in
// idemprom/internal/integration share: a scrape of the exporter's endpoint,
// parsed as Prometheus reads it, and guard traffic of every outcome. It
// imports nothing beyond idemprom's own dependencies and the root module.
package idempromtest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemprom"
	"github.com/idemgo/idem/store/memory"
)

// Scrape fetches the endpoint and parses what Prometheus would read.
func Scrape(t testing.TB, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rr.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", rr.Code, rr.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rr.Body)
	if err != nil {
		t.Fatalf("parse the scrape: %v", err)
	}
	return fams
}

// Traffic runs messages through a guard observed by exp: 3 processed, 2
// duplicates, 1 conflict, 1 failure; and leaves one in-progress record
// stale and one completed record expired.
func Traffic(t testing.TB, st *memory.Store, exp *idemprom.Exporter, now time.Time) {
	t.Helper()
	ctx := context.Background()
	clock := func() time.Time { return now }
	g, err := idem.New(st, idem.Options{Scope: "billing", Observer: exp.Observer(), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context) ([]byte, error) { return []byte("ok"), nil }
	for _, id := range []string{"a", "b", "c", "a", "b"} {
		if _, err := g.Do(ctx, idem.Message{ID: id, Payload: []byte(id)}, ok); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.Do(ctx, idem.Message{ID: "a", Payload: []byte("other")}, ok); !errors.Is(err, idem.ErrConflict) {
		t.Fatalf("conflict: %v", err)
	}
	boom := errors.New("boom")
	if _, err := g.Do(ctx, idem.Message{ID: "d", Payload: []byte("d")}, func(context.Context) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("failure: %v", err)
	}
	// A crashed owner: in progress, lease ended a minute ago.
	if _, err := st.Claim(ctx, idem.ClaimRequest{Key: idem.Key{Scope: "billing", ID: "stuck"}, Now: now.Add(-2 * time.Minute),
		LeaseUntil: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// Expired: completed with a retention that ended.
	k := idem.Key{Scope: "mailer", ID: "old"}
	c, err := st.Claim(ctx, idem.ClaimRequest{Key: k, Now: now.Add(-3 * time.Hour), LeaseUntil: now.Add(-3 * time.Hour).Add(time.Minute), ExpiresAt: now.Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Complete(ctx, idem.CompleteRequest{Key: k, Token: c.Record.Token, Now: now.Add(-3 * time.Hour), ExpiresAt: now.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
}
