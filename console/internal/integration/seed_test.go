package integration_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/console"
	"github.com/idemgo/idem/outbox"
	outboxmem "github.com/idemgo/idem/outbox/memory"
	"github.com/idemgo/idem/store/memory"
	"github.com/idemgo/idem/store/sqlite"
)

// Hostile values: each would run script, or change the page, if it were
// ever interpreted instead of shown as text. A page that runs any of them
// sets window.__pwned or adds an element with id "pwned".
const (
	xssKey    = `<script>window.__pwned=1</script><img id="pwned" src=x onerror="window.__pwned=2">`
	xssScope  = `billing"><svg id="pwned" onload="window.__pwned=3">`
	xssResult = `</pre><script>window.__pwned=4</script><iframe id="pwned" srcdoc="<script>parent.__pwned=5</script>"></iframe>{{.}}`
	xssStale  = `'><a id="pwned" href="javascript:window.__pwned=6">x</a>` + "\u202e"
)

// seeded describes what seed put in a store.
type seeded struct {
	now    time.Time
	parked idem.Key // a stale in-progress record, to resolve
	live   idem.Key // an in-progress record with a live lease
	xss    idem.Key // a completed record with a hostile key and result
	xssOld idem.Key // a stale record with a hostile key
}

// seed writes records in every state into s, as of now: in two ordinary
// scopes and one hostile one: completed, in progress (live), in progress
// with its lease ended (stale), released, and completed past its retention
// (expired, awaiting a sweep).
func seed(t testing.TB, s console.Store, now time.Time) seeded { return seedWith(t, s, now, true) }

// seedWith seeds s, with the hostile records or without them.
func seedWith(t testing.TB, s console.Store, now time.Time, hostile bool) seeded {
	t.Helper()
	ctx := context.Background()
	claim := func(k idem.Key, at, lease, expires time.Time) idem.Record {
		t.Helper()
		c, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Fingerprint: "fp-" + k.ID, Now: at, LeaseUntil: lease, ExpiresAt: expires})
		if err != nil || c.Outcome != idem.ClaimAcquired {
			t.Fatalf("claim %s: %v %v", k, c.Outcome, err)
		}
		return c.Record
	}
	complete := func(k idem.Key, at time.Time, result []byte, expires time.Time) {
		t.Helper()
		r := claim(k, at, at.Add(30*time.Second), expires)
		if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: r.Token, Result: result, Now: at, ExpiresAt: expires}); err != nil {
			t.Fatalf("complete %s: %v", k, err)
		}
	}
	day := 24 * time.Hour
	var sd seeded
	sd.now = now
	for i := range 12 {
		complete(idem.Key{Scope: "billing", ID: fmt.Sprintf("order-%03d", i)}, now.Add(-time.Hour), []byte(fmt.Sprintf(`{"charge":"ch_%d"}`, i)), now.Add(day))
	}
	for i := range 3 {
		complete(idem.Key{Scope: "mailer", ID: fmt.Sprintf("welcome/user-%d", i)}, now.Add(-2*time.Hour), nil, now.Add(day))
	}
	// Expired: completed two days ago with a day's retention.
	for i := range 2 {
		complete(idem.Key{Scope: "mailer", ID: fmt.Sprintf("old/user-%d", i)}, now.Add(-2*day), nil, now.Add(-day))
	}
	// In progress, live.
	sd.live = idem.Key{Scope: "billing", ID: "order-live"}
	claim(sd.live, now.Add(-5*time.Second), now.Add(25*time.Second), now.Add(day))
	// In progress, lease ended ten minutes ago: stale, waiting for an operator.
	sd.parked = idem.Key{Scope: "billing", ID: "order-stuck"}
	claim(sd.parked, now.Add(-11*time.Minute), now.Add(-10*time.Minute), now.Add(day))
	// Released.
	rel := idem.Key{Scope: "billing", ID: "order-released"}
	r := claim(rel, now.Add(-time.Minute), now.Add(29*time.Second), now.Add(day))
	if err := s.Release(ctx, idem.ReleaseRequest{Key: rel, Token: r.Token, Now: now.Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if !hostile {
		return sd
	}
	// Hostile: a completed record and a stale one.
	sd.xss = idem.Key{Scope: xssScope, ID: xssKey}
	complete(sd.xss, now.Add(-time.Minute), []byte(xssResult), now.Add(day))
	sd.xssOld = idem.Key{Scope: xssScope, ID: xssStale}
	claim(sd.xssOld, now.Add(-3*time.Minute), now.Add(-2*time.Minute), now.Add(day))
	return sd
}

// stores are the stores the console is tested on in-process.
var stores = []struct {
	name string
	open func(t testing.TB) console.Store
}{
	{"memory", func(t testing.TB) console.Store { return memory.New() }},
	{"sqlite", func(t testing.TB) console.Store {
		s, err := sqlite.Open(filepath.Join(t.TempDir(), "idem.db"), sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s
	}},
}

// seedOutbox returns an outbox holding three pending messages and two
// parked ones, one of each carrying hostile text in its id, payload and
// last error.
func seedOutbox(t testing.TB, now time.Time) *outboxmem.Store {
	t.Helper()
	ob, err := outboxmem.New(outboxmem.Options{Clock: func() time.Time { return now.Add(-5 * time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	msgs := []outbox.Message{
		{ID: "charge-1", Destination: "payments", OrderingKey: "acct-1", Payload: []byte(`{"amount":100}`)},
		{ID: "charge-2", Destination: "payments", OrderingKey: "acct-2", Payload: []byte(`{"amount":250}`)},
		{ID: `<img id="pwned" src=x onerror="window.__pwned=10">`, Destination: "payments", Payload: []byte(`<script>window.__pwned=11</script>`)},
		{ID: "mail-1", Destination: "mail", Payload: []byte(`{"to":"a@example.com"}`)},
		{ID: "mail-2", Destination: "mail", Payload: []byte(`{"to":"b@example.com"}`)},
	}
	if err := ob.InTx(ctx, func(ctx context.Context, tx *outboxmem.Tx) error { return ob.Enqueue(ctx, tx, msgs...) }); err != nil {
		t.Fatal(err)
	}
	recs, err := ob.Fetch(ctx, outbox.FetchRequest{Now: now, Limit: 10})
	if err != nil || len(recs) != 5 {
		t.Fatalf("fetch: %d %v", len(recs), err)
	}
	var fs []outbox.Failure
	for _, r := range recs {
		switch r.ID {
		case "mail-1":
			fs = append(fs, outbox.Failure{Seq: r.Seq, Attempts: 5, NextAttemptAt: now, Error: "no route to exchange mail", Park: true})
		case "mail-2":
			fs = append(fs, outbox.Failure{Seq: r.Seq, Attempts: 1, NextAttemptAt: now, Error: `rejected: <b id="pwned" onclick="window.__pwned=12">`, Park: true})
		}
	}
	if err := ob.MarkFailed(ctx, fs); err != nil {
		t.Fatal(err)
	}
	return ob
}
