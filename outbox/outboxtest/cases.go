package outboxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
)

func testRoundTrip(e *env) {
	in := []outbox.Message{
		{ID: "a", Destination: "orders.created", RoutingKey: "rk", OrderingKey: "order-1",
			Headers: map[string]string{"Content-Type": "application/json", "traceparent": "00-abc", "ünï": "çødé"},
			Payload: []byte(`{"id":1}`)},
		{ID: "b", Destination: "orders.created", Payload: nil},                    // no payload, no headers
		{ID: "c", Destination: "bin", Payload: []byte{0, 1, 2, 0xff, 0, '\n', 0}}, // binary
		{ID: "d", Destination: "x", Headers: map[string]string{"empty": ""}, Payload: []byte{}},
	}
	e.enqueue(in...)
	got := e.fetch()
	if len(got) != len(in) {
		e.t.Fatalf("fetched %d records, want %d", len(got), len(in))
	}
	for i, r := range got {
		m := in[i]
		if r.ID != m.ID || r.Destination != m.Destination || r.RoutingKey != m.RoutingKey || r.OrderingKey != m.OrderingKey {
			e.t.Errorf("record %d: %+v, want the fields of %+v", i, r.Message, m)
		}
		if !bytes.Equal(r.Payload, m.Payload) {
			e.t.Errorf("record %s: payload %q, want %q", r.ID, r.Payload, m.Payload)
		}
		if len(r.Headers) != len(m.Headers) || (len(m.Headers) > 0 && !reflect.DeepEqual(r.Headers, m.Headers)) {
			e.t.Errorf("record %s: headers %v, want %v", r.ID, r.Headers, m.Headers)
		}
		if r.Fingerprint != outbox.Fingerprint(m) {
			e.t.Errorf("record %s: fingerprint %q, want outbox.Fingerprint's %q", r.ID, r.Fingerprint, outbox.Fingerprint(m))
		}
		if !r.CreatedAt.Equal(T0) || !r.NextAttemptAt.Equal(T0) {
			e.t.Errorf("record %s: created %v, next attempt %v, want both at the store's clock %v", r.ID, r.CreatedAt, r.NextAttemptAt, T0)
		}
		if !r.Pending() || r.Parked || r.Attempts != 0 || r.LastError != "" || r.Seq <= 0 {
			e.t.Errorf("record %s: %+v, want a fresh pending record with a positive Seq", r.ID, r)
		}
	}
	if e.t.Failed() {
		return
	}
	// A store's clock may run ahead of the relay's: a record is ready once
	// the fetch's Now reaches its NextAttemptAt, not before.
	if early := e.fetchAt(T0.Add(-time.Millisecond), 100); len(early) != 0 {
		e.t.Errorf("fetched %v a millisecond before they were created", ids(early))
	}
}

func testFetchOrder(e *env) {
	for i := range 30 {
		e.enqueue(msg(fmt.Sprintf("m%02d", i), "d", ""))
	}
	got := e.fetchAt(e.clock.Now(), 10)
	if want := []string{"m00", "m01", "m02", "m03", "m04", "m05", "m06", "m07", "m08", "m09"}; !slices.Equal(ids(got), want) {
		e.t.Fatalf("fetch with Limit 10: %v, want %v", ids(got), want)
	}
	if err := e.s.Store.MarkPublished(e.ctx, seqs(got), e.clock.Now()); err != nil {
		e.t.Fatal(err)
	}
	if got := e.fetchAt(e.clock.Now(), 5); !slices.Equal(ids(got), []string{"m10", "m11", "m12", "m13", "m14"}) {
		e.t.Fatalf("fetch after marking the first 10: %v", ids(got))
	}
	if got, err := e.s.Store.Fetch(e.ctx, outbox.FetchRequest{Now: e.clock.Now(), Limit: 0}); err != nil || len(got) != 0 {
		e.t.Fatalf("fetch with Limit 0: %d records, %v; want none", len(got), err)
	}
	// The relay's previous batch, still being marked, is left out.
	next := e.fetchAt(e.clock.Now(), 5)
	got, err := e.s.Store.Fetch(e.ctx, outbox.FetchRequest{Now: e.clock.Now(), Limit: 5, Exclude: seqs(next)})
	if err != nil {
		e.t.Fatal(err)
	}
	if !slices.Equal(ids(got), []string{"m15", "m16", "m17", "m18", "m19"}) {
		e.t.Fatalf("fetch excluding m10..m14: %v", ids(got))
	}
}

func testRollback(e *env) {
	boom := errors.New("business failure")
	err := e.s.InTx(e.ctx, func(ctx context.Context, enq Enqueue) error {
		if err := enq(ctx, msg("r1", "d", "k"), msg("r2", "d", "")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		e.t.Fatalf("InTx: %v, want the handler's error", err)
	}
	if got := e.fetch(); len(got) != 0 {
		e.t.Fatalf("a rolled back transaction left %v", ids(got))
	}
	if st := e.stats(); st.Pending != 0 || st.Published != 0 {
		e.t.Fatalf("stats after rollback: %+v", st)
	}
	// The ids are free: the same messages enqueue after the rollback.
	e.enqueue(msg("r1", "d", "k"), msg("r2", "d", ""))
	if got := e.fetch(); !slices.Equal(ids(got), []string{"r1", "r2"}) {
		e.t.Fatalf("after the rollback and a commit: %v", ids(got))
	}
}

func testInvalid(e *env) {
	ok := msg("fine", "d", "")
	cases := []struct {
		name string
		m    outbox.Message
		want error
	}{
		{"no destination", outbox.Message{ID: "x", Payload: []byte("p")}, outbox.ErrNoDestination},
		{"blank destination", outbox.Message{ID: "x", Destination: "  "}, outbox.ErrNoDestination},
		{"payload over the limit", outbox.Message{ID: "x", Destination: "d", Payload: make([]byte, outbox.DefaultMaxPayload+1)}, outbox.ErrPayloadTooLarge},
		{"id too long", outbox.Message{ID: strings.Repeat("i", outbox.MaxIDLen+1), Destination: "d"}, outbox.ErrInvalidID},
		{"blank id", outbox.Message{ID: " ", Destination: "d"}, outbox.ErrInvalidID},
		{"id not text", outbox.Message{ID: "a\x00b", Destination: "d"}, outbox.ErrInvalidID},
		{"destination with a newline", outbox.Message{ID: "x", Destination: "a\nb"}, outbox.ErrInvalidField},
		{"ordering key too long", outbox.Message{ID: "x", Destination: "d", OrderingKey: strings.Repeat("k", outbox.MaxFieldLen+1)}, outbox.ErrInvalidField},
		{"routing key not UTF-8", outbox.Message{ID: "x", Destination: "d", RoutingKey: "\xff"}, outbox.ErrInvalidField},
		{"header name with a colon", outbox.Message{ID: "x", Destination: "d", Headers: map[string]string{"a:b": "v"}}, outbox.ErrInvalidField},
		{"header value with CRLF", outbox.Message{ID: "x", Destination: "d", Headers: map[string]string{"h": "v\r\nInjected: 1"}}, outbox.ErrInvalidField},
		{"headers over the limit", outbox.Message{ID: "x", Destination: "d", Headers: map[string]string{"h": strings.Repeat("v", outbox.DefaultMaxHeaderBytes)}}, outbox.ErrHeadersTooLarge},
		{"duplicate id in one call", ok, outbox.ErrDuplicateID},
	}
	for _, c := range cases {
		err := e.tryEnqueue(e.ctx, ok, c.m)
		var me *outbox.MessageError
		if !errors.Is(err, c.want) || !errors.Is(err, outbox.ErrInvalidMessage) || !errors.As(err, &me) || me.Index != 1 {
			e.t.Errorf("%s: %v, want a *MessageError for message 1 wrapping %v and ErrInvalidMessage", c.name, err, c.want)
		}
		if !idem.IsPermanent(err) {
			e.t.Errorf("%s: idem.IsPermanent(%v) is false: an inbound message would be retried forever", c.name, err)
		}
	}
	if got := e.fetch(); len(got) != 0 {
		e.t.Fatalf("refused calls wrote %v (the valid message beside the invalid one included)", ids(got))
	}
}

func testSameID(e *env) {
	e.enqueue(msg("once", "d", "k"))
	e.clock.Advance(time.Second)
	// A handler run again (its lease ran out after its transaction
	// committed) enqueues the same message: the outbox keeps one.
	e.enqueue(msg("once", "d", "k"), msg("new", "d", "k"))
	got := e.fetch()
	if !slices.Equal(ids(got), []string{"once", "new"}) {
		e.t.Fatalf("records %v, want once and new", ids(got))
	}
	if !got[0].CreatedAt.Equal(T0) {
		e.t.Errorf("the repeat changed the first record's CreatedAt to %v", got[0].CreatedAt)
	}
	// Published and enqueued again: still not a second message.
	if err := e.s.Store.MarkPublished(e.ctx, seqs(got), e.clock.Now()); err != nil {
		e.t.Fatal(err)
	}
	e.enqueue(msg("once", "d", "k"))
	if got := e.fetch(); len(got) != 0 {
		e.t.Fatalf("a published id enqueued again is pending again: %v", ids(got))
	}
}

func testConflict(e *env) {
	e.enqueue(msg("id-1", "d", ""))
	for _, other := range []outbox.Message{
		{ID: "id-1", Destination: "d", Payload: []byte("other content")},
		{ID: "id-1", Destination: "elsewhere", Payload: []byte("payload of id-1")},
		{ID: "id-1", Destination: "d", OrderingKey: "k", Payload: []byte("payload of id-1")},
	} {
		err := e.tryEnqueue(e.ctx, msg("id-2", "d", ""), other)
		var ce *outbox.ConflictError
		if !errors.As(err, &ce) || ce.ID != "id-1" || !errors.Is(err, outbox.ErrConflict) || !errors.Is(err, idem.ErrConflict) {
			e.t.Errorf("%+v: %v, want a *ConflictError for id-1 (ErrConflict, idem.ErrConflict)", other, err)
			continue
		}
		if ce.Stored != outbox.Fingerprint(msg("id-1", "d", "")) || ce.Fingerprint != outbox.Fingerprint(other) {
			e.t.Errorf("conflict fingerprints stored %q new %q", ce.Stored, ce.Fingerprint)
		}
	}
	// Headers are not content: another traceparent is the same message.
	same := msg("id-1", "d", "")
	same.Headers = map[string]string{"traceparent": "00-other"}
	e.enqueue(same)
	got := e.fetch()
	if !slices.Equal(ids(got), []string{"id-1"}) || string(got[0].Payload) != "payload of id-1" || len(got[0].Headers) != 0 {
		e.t.Fatalf("after the conflicts: %+v, want id-1 alone, as first written", got)
	}
}

func testDerived(e *env) {
	key := idem.Key{Scope: "billing", ID: "order-7"}
	handler := func(ctx context.Context, enq Enqueue) error {
		return enq(ctx,
			outbox.Message{Destination: "charged", Payload: []byte("c")},
			outbox.Message{Destination: "mail", Payload: []byte("m")},
			outbox.Message{Destination: "charged", Payload: []byte("c2")},
		)
	}
	ctx := idem.ContextWithKey(e.ctx, key)
	// The first run rolls back (a deadlock, a crash before commit); the
	// redelivery runs the handler again and commits.
	rollback := errors.New("first run rolled back")
	if err := e.s.InTx(ctx, func(ctx context.Context, enq Enqueue) error {
		if err := handler(ctx, enq); err != nil {
			return err
		}
		return rollback
	}); !errors.Is(err, rollback) {
		e.t.Fatal(err)
	}
	for range 2 { // committed, then run again after its lease ran out
		if err := e.s.InTx(ctx, handler); err != nil {
			e.t.Fatal(err)
		}
	}
	want := []string{key.Derive("outbox:charged#0"), key.Derive("outbox:mail#0"), key.Derive("outbox:charged#1")}
	if got := e.fetch(); !slices.Equal(ids(got), want) {
		e.t.Fatalf("derived ids %v, want %v (DeriveKey of the inbound key)", ids(got), want)
	}
	// Another inbound message derives other ids.
	other := idem.ContextWithKey(e.ctx, idem.Key{Scope: "billing", ID: "order-8"})
	if err := e.s.InTx(other, handler); err != nil {
		e.t.Fatal(err)
	}
	if got := e.fetch(); len(got) != 6 {
		e.t.Fatalf("two inbound messages gave %d records, want 6", len(got))
	}
	// Outside an idem handler: random ids, one record per message.
	if err := e.tryEnqueue(e.ctx, outbox.Message{Destination: "x"}, outbox.Message{Destination: "x"}); err != nil {
		e.t.Fatal(err)
	}
	if got := e.fetch(); len(got) != 8 || got[6].ID == got[7].ID || got[6].ID == "" {
		e.t.Fatalf("unkeyed messages: %v", ids(got))
	}
}

func testMarkPublished(e *env) {
	e.enqueue(msg("p1", "d", "k"), msg("p2", "d", "k"), msg("p3", "d", ""))
	got := e.fetch()
	at := T0.Add(1500 * time.Millisecond)
	if err := e.s.Store.MarkPublished(e.ctx, []int64{got[0].Seq, got[2].Seq, 1 << 50}, at); err != nil {
		e.t.Fatal(err)
	}
	if left := e.fetch(); !slices.Equal(ids(left), []string{"p2"}) {
		e.t.Fatalf("after marking p1, p3 (and an unknown seq): %v, want p2", ids(left))
	}
	pub := e.list(outbox.ListFilter{State: outbox.StatePublished})
	if len(pub) != 2 || !pub[0].PublishedAt.Equal(at) || pub[0].State() != outbox.StatePublished {
		e.t.Fatalf("published records %+v, want p1 and p3 published at %v", pub, at)
	}
	// Marking again keeps the first confirmation time.
	if err := e.s.Store.MarkPublished(e.ctx, []int64{got[0].Seq}, at.Add(time.Hour)); err != nil {
		e.t.Fatal(err)
	}
	if pub := e.list(outbox.ListFilter{State: outbox.StatePublished}); !pub[0].PublishedAt.Equal(at) {
		e.t.Fatalf("a second mark moved PublishedAt to %v", pub[0].PublishedAt)
	}
	if err := e.s.Store.MarkPublished(e.ctx, nil, at); err != nil {
		e.t.Fatalf("MarkPublished of nothing: %v", err)
	}
}

func testFailureHoldsKey(e *env) {
	e.enqueue(msg("a1", "d", "A"), msg("b1", "d", "B"), msg("a2", "d", "A"), msg("u1", "d", ""), msg("b2", "d", "B"), msg("a3", "d", "A"))
	got := e.fetch()
	if !slices.Equal(ids(got), []string{"a1", "b1", "a2", "u1", "b2", "a3"}) {
		e.t.Fatalf("fetch: %v", ids(got))
	}
	retry := T0.Add(10 * time.Second)
	if err := e.s.Store.MarkFailed(e.ctx, []outbox.Failure{{Seq: got[0].Seq, Attempts: 1, NextAttemptAt: retry, Error: "broker down"}}); err != nil {
		e.t.Fatal(err)
	}
	// a1 waits for its back-off and holds a2 and a3 back; B and the
	// unordered message flow.
	if held := e.fetch(); !slices.Equal(ids(held), []string{"b1", "u1", "b2"}) {
		e.t.Fatalf("while a1 backs off: %v, want b1 u1 b2", ids(held))
	}
	a := e.list(outbox.ListFilter{OrderingKey: "A"})
	if len(a) != 3 || a[0].Attempts != 1 || !a[0].NextAttemptAt.Equal(retry) || a[0].LastError != "broker down" || a[0].Parked {
		e.t.Fatalf("a1 after its failure: %+v", a)
	}
	if ready := e.fetchAt(retry, 100); !slices.Equal(ids(ready), []string{"a1", "b1", "a2", "u1", "b2", "a3"}) {
		e.t.Fatalf("once the back-off ends: %v", ids(ready))
	}
	// A failure of a later message of the key holds back only what follows it.
	if err := e.s.Store.MarkFailed(e.ctx, []outbox.Failure{{Seq: got[0].Seq, Attempts: 2, NextAttemptAt: T0, Error: "e"}}); err != nil {
		e.t.Fatal(err)
	}
	if err := e.s.Store.MarkPublished(e.ctx, []int64{got[0].Seq}, T0); err != nil {
		e.t.Fatal(err)
	}
	if err := e.s.Store.MarkFailed(e.ctx, []outbox.Failure{{Seq: got[2].Seq, Attempts: 1, NextAttemptAt: retry, Error: "e"}}); err != nil {
		e.t.Fatal(err)
	}
	if held := e.fetch(); !slices.Equal(ids(held), []string{"b1", "u1", "b2"}) {
		e.t.Fatalf("a1 published, a2 backing off: %v, want b1 u1 b2", ids(held))
	}
	// A failure recorded for a published record changes nothing.
	if err := e.s.Store.MarkFailed(e.ctx, []outbox.Failure{{Seq: got[0].Seq, Attempts: 9, NextAttemptAt: retry, Park: true}}); err != nil {
		e.t.Fatal(err)
	}
	if a := e.list(outbox.ListFilter{OrderingKey: "A"}); a[0].Attempts != 2 || a[0].Parked {
		e.t.Fatalf("MarkFailed changed a published record: %+v", a[0])
	}
}

func testParked(e *env) {
	e.enqueue(msg("a1", "d", "A"), msg("a2", "d", "A"), msg("b1", "d", "B"), msg("u1", "d", ""))
	got := e.fetch()
	if err := e.s.Store.MarkFailed(e.ctx, []outbox.Failure{
		{Seq: got[0].Seq, Attempts: 1, NextAttemptAt: T0, Error: "rejected: too large", Park: true},
		{Seq: got[3].Seq, Attempts: 1, NextAttemptAt: T0, Error: "rejected", Park: true},
	}); err != nil {
		e.t.Fatal(err)
	}
	later := T0.Add(24 * time.Hour)
	if held := e.fetchAt(later, 100); !slices.Equal(ids(held), []string{"b1"}) {
		e.t.Fatalf("with a1 and u1 parked, a day later: %v, want b1 only", ids(held))
	}
	st := e.stats()
	if st.Parked != 2 || st.Pending != 2 {
		e.t.Fatalf("stats %+v, want 2 parked, 2 pending", st)
	}
	parked := e.list(outbox.ListFilter{State: outbox.StateParked})
	if !slices.Equal(ids(parked), []string{"a1", "u1"}) || parked[0].LastError != "rejected: too large" {
		e.t.Fatalf("parked: %+v", parked)
	}
	e.clock.Advance(time.Minute)
	n, err := e.in.Retry(e.ctx, outbox.RetryRequest{Seqs: []int64{got[0].Seq}, Now: e.clock.Now()})
	if err != nil || n != 1 {
		e.t.Fatalf("retry a1: %d, %v", n, err)
	}
	if ready := e.fetch(); !slices.Equal(ids(ready), []string{"a1", "a2", "b1"}) {
		e.t.Fatalf("after retrying a1: %v", ids(ready))
	}
	a := e.list(outbox.ListFilter{OrderingKey: "A"})
	if a[0].Parked || a[0].Attempts != 0 || !a[0].NextAttemptAt.Equal(e.clock.Now()) {
		e.t.Fatalf("a1 after retry: %+v, want pending, no attempts, due now", a[0])
	}
	if n, err := e.in.Retry(e.ctx, outbox.RetryRequest{Now: e.clock.Now()}); err != nil || n != 1 {
		e.t.Fatalf("retry all: %d, %v; want u1 alone", n, err)
	}
	if n, err := e.in.Retry(e.ctx, outbox.RetryRequest{Now: e.clock.Now()}); err != nil || n != 0 {
		e.t.Fatalf("retry with nothing parked: %d, %v", n, err)
	}
}

func testLease(e *env) {
	s := e.s.Store
	take := func(owner string, token int64, now time.Time, d time.Duration) outbox.Lease {
		e.t.Helper()
		l, err := s.Lease(e.ctx, outbox.LeaseRequest{Owner: owner, Token: token, Now: now, Until: now.Add(d)})
		if err != nil {
			e.t.Fatalf("lease for %s: %v", owner, err)
		}
		return l
	}
	const d = 10 * time.Second
	a := take("a", 0, T0, d)
	if !a.Held("a", T0) || a.Token <= 0 || !a.Until.Equal(T0.Add(d)) {
		e.t.Fatalf("a's first lease: %+v", a)
	}
	if b := take("b", 0, T0.Add(time.Second), d); b.Held("b", T0.Add(time.Second)) || b != a {
		e.t.Fatalf("b took a live lease: %+v (a holds %+v)", b, a)
	}
	if st := e.stats(); st.Lease != a {
		e.t.Fatalf("stats show lease %+v, want %+v", st.Lease, a)
	}
	renewed := take("a", a.Token, T0.Add(3*time.Second), d)
	if renewed.Token != a.Token || !renewed.Until.Equal(T0.Add(13*time.Second)) {
		e.t.Fatalf("renewal: %+v, want token %d until +13s", renewed, a.Token)
	}
	// a dies: once the lease ends, b takes it over with a higher token.
	if b := take("b", 0, T0.Add(12*time.Second), d); b.Held("b", T0.Add(12*time.Second)) {
		e.t.Fatalf("b took the lease before it ended: %+v", b)
	}
	b := take("b", 0, T0.Add(13*time.Second), d)
	if !b.Held("b", T0.Add(13*time.Second)) || b.Token <= a.Token {
		e.t.Fatalf("b after a's lease ended: %+v, want held with a token above %d", b, a.Token)
	}
	// The zombie a cannot renew over b.
	if z := take("a", a.Token, T0.Add(14*time.Second), d); z.Held("a", T0.Add(14*time.Second)) || z != b {
		e.t.Fatalf("a renewed over b: %+v", z)
	}
	if err := s.ReleaseLease(e.ctx, outbox.LeaseRequest{Owner: "a", Token: a.Token, Now: T0.Add(14 * time.Second)}); err != nil {
		e.t.Fatal(err)
	}
	if c := take("c", 0, T0.Add(14*time.Second), d); c.Held("c", T0.Add(14*time.Second)) {
		e.t.Fatalf("a's stale release freed b's lease: c holds %+v", c)
	}
	if err := s.ReleaseLease(e.ctx, outbox.LeaseRequest{Owner: "b", Token: b.Token, Now: T0.Add(15 * time.Second)}); err != nil {
		e.t.Fatal(err)
	}
	c := take("c", 0, T0.Add(15*time.Second), d)
	if !c.Held("c", T0.Add(15*time.Second)) || c.Token <= b.Token {
		e.t.Fatalf("after b released: c got %+v", c)
	}
	// An owner whose lease ended and was not taken over takes it again,
	// with a new token.
	c2 := take("c", c.Token, T0.Add(60*time.Second), d)
	if !c2.Held("c", T0.Add(60*time.Second)) || c2.Token <= c.Token {
		e.t.Fatalf("c after its own lease ended: %+v", c2)
	}
}

func testCleanup(e *env) {
	for i := range 10 {
		e.enqueue(msg(fmt.Sprintf("c%d", i), "d", ""))
	}
	got := e.fetch()
	// c0..c5 published at T0+i s; c6 parked; c7..c9 pending.
	for i := range 6 {
		if err := e.s.Store.MarkPublished(e.ctx, []int64{got[i].Seq}, T0.Add(time.Duration(i)*time.Second)); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := e.s.Store.MarkFailed(e.ctx, []outbox.Failure{{Seq: got[6].Seq, Attempts: 1, NextAttemptAt: T0, Park: true}}); err != nil {
		e.t.Fatal(err)
	}
	if n, err := e.s.Store.Cleanup(e.ctx, outbox.CleanupRequest{Before: T0.Add(4 * time.Second), Limit: 0}); err != nil || n != 0 {
		e.t.Fatalf("cleanup with Limit 0: %d, %v", n, err)
	}
	n, err := e.s.Store.Cleanup(e.ctx, outbox.CleanupRequest{Before: T0.Add(4 * time.Second), Limit: 3})
	if err != nil || n != 3 {
		e.t.Fatalf("cleanup with Limit 3: %d, %v", n, err)
	}
	n, err = e.s.Store.Cleanup(e.ctx, outbox.CleanupRequest{Before: T0.Add(4 * time.Second), Limit: 3})
	if err != nil || n != 1 {
		e.t.Fatalf("second cleanup: %d, %v; want c3 alone (c4, c5 published at or after the cutoff)", n, err)
	}
	left := e.list(outbox.ListFilter{Limit: 100})
	if !slices.Equal(ids(left), []string{"c4", "c5", "c6", "c7", "c8", "c9"}) {
		e.t.Fatalf("after cleanup: %v", ids(left))
	}
	// Pending and parked records are never deleted, however old.
	if _, err := e.s.Store.Cleanup(e.ctx, outbox.CleanupRequest{Before: T0.Add(1000 * time.Hour), Limit: 100}); err != nil {
		e.t.Fatal(err)
	}
	if left := e.list(outbox.ListFilter{}); !slices.Equal(ids(left), []string{"c6", "c7", "c8", "c9"}) {
		e.t.Fatalf("cleanup deleted unpublished records: %v left", ids(left))
	}
	// An id cleaned up is free again (the consumer's records dedup it).
	e.enqueue(msg("c0", "d", ""))
	if got := e.list(outbox.ListFilter{State: outbox.StatePending}); !slices.Contains(ids(got), "c0") {
		e.t.Fatalf("c0 enqueued after its cleanup is not pending: %v", ids(got))
	}
}

func testStatsList(e *env) {
	if st := e.stats(); st != (outbox.Stats{}) {
		e.t.Fatalf("stats of an empty outbox: %+v", st)
	}
	e.enqueue(msg("s1", "orders", "A"))
	e.clock.Advance(time.Second)
	e.enqueue(msg("s2", "orders", "B"), msg("s3", "mail", ""))
	e.clock.Advance(time.Second)
	e.enqueue(msg("s4", "mail", "A"))
	got := e.fetch()
	if err := e.s.Store.MarkPublished(e.ctx, []int64{got[0].Seq}, e.clock.Now()); err != nil {
		e.t.Fatal(err)
	}
	if err := e.s.Store.MarkFailed(e.ctx, []outbox.Failure{{Seq: got[1].Seq, Attempts: 3, NextAttemptAt: T0, Park: true, Error: "x"}}); err != nil {
		e.t.Fatal(err)
	}
	st := e.stats()
	if st.Pending != 2 || st.Parked != 1 || st.Published != 1 || !st.OldestPending.Equal(T0.Add(time.Second)) {
		e.t.Fatalf("stats %+v, want 2 pending (oldest s3 at T0+1s), 1 parked, 1 published", st)
	}
	if lag := st.Lag(T0.Add(5 * time.Second)); lag != 4*time.Second {
		e.t.Fatalf("lag %v, want 4s", lag)
	}
	for _, c := range []struct {
		f    outbox.ListFilter
		want []string
	}{
		{outbox.ListFilter{}, []string{"s1", "s2", "s3", "s4"}},
		{outbox.ListFilter{State: outbox.StatePending}, []string{"s3", "s4"}},
		{outbox.ListFilter{State: outbox.StateParked}, []string{"s2"}},
		{outbox.ListFilter{State: outbox.StatePublished}, []string{"s1"}},
		{outbox.ListFilter{Destination: "mail"}, []string{"s3", "s4"}},
		{outbox.ListFilter{OrderingKey: "A"}, []string{"s1", "s4"}},
		{outbox.ListFilter{Limit: 2}, []string{"s1", "s2"}},
		{outbox.ListFilter{AfterSeq: got[1].Seq, Limit: 1}, []string{"s3"}},
	} {
		if got := e.list(c.f); !slices.Equal(ids(got), c.want) {
			e.t.Errorf("list %+v: %v, want %v", c.f, ids(got), c.want)
		}
	}
	full := e.list(outbox.ListFilter{State: outbox.StateParked})
	if len(full) != 1 || string(full[0].Payload) != "payload of s2" || full[0].Attempts != 3 || full[0].LastError != "x" || !full[0].Parked {
		e.t.Fatalf("listed record: %+v", full)
	}
}

// testNotBefore: a message's NotBefore comes back from Fetch and List as
// written (a whole millisecond, every store's precision), alone in its
// call and among others; none stays none. It does not hold the record back:
// scheduling is the broker's.
func testNotBefore(e *env) {
	at := T0.Add(90*time.Minute + 250*time.Millisecond)
	e.enqueue(outbox.Message{ID: "alone", Destination: "d", Payload: []byte("1"), NotBefore: at})
	e.enqueue(
		outbox.Message{ID: "none", Destination: "d", Payload: []byte("2")},
		outbox.Message{ID: "among", Destination: "d", OrderingKey: "k", Payload: []byte("3"), NotBefore: at.Add(time.Second)},
	)
	want := map[string]time.Time{"alone": at, "none": {}, "among": at.Add(time.Second)}
	for _, got := range [][]outbox.Record{e.fetch(), e.list(outbox.ListFilter{})} {
		if !slices.Equal(ids(got), []string{"alone", "none", "among"}) {
			e.t.Fatalf("got %v, want alone, none, among: NotBefore does not hold a record back", ids(got))
		}
		for _, r := range got {
			if !r.NotBefore.Equal(want[r.ID]) {
				e.t.Errorf("record %s: NotBefore %v, want %v", r.ID, r.NotBefore, want[r.ID])
			}
		}
	}
}

func testLargePayload(e *env) {
	big := make([]byte, outbox.DefaultMaxPayload)
	for i := range big {
		big[i] = byte(i * 7)
	}
	e.enqueue(outbox.Message{ID: "big", Destination: "d", Payload: big, Headers: map[string]string{"h": strings.Repeat("v", 60<<10)}})
	got := e.fetch()
	if len(got) != 1 || !bytes.Equal(got[0].Payload, big) || len(got[0].Headers["h"]) != 60<<10 {
		e.t.Fatalf("a 1 MiB payload with 60 KiB of headers did not come back intact")
	}
}

// testKeyCommitOrder: per ordering key, Seq order is commit order. T1
// enqueues on key K first and commits last; T2 enqueues on K after T1 and
// tries to commit at once. A store that gives T2 its Seq without waiting
// for T1 lets T2 commit first with the higher Seq, and the relay would
// publish T1's message (commit second) ahead of T2's.
func testKeyCommitOrder(e *env) {
	if e.s.SerialWriters {
		e.t.Skip("one write transaction at a time: commit order is Seq order")
	}
	t1Enqueued := make(chan struct{})
	releaseT1 := make(chan struct{})
	t1done := make(chan error, 1)
	go func() {
		t1done <- e.s.InTx(e.ctx, func(ctx context.Context, enq Enqueue) error {
			if err := enq(ctx, msg("t1", "d", "K")); err != nil {
				return err
			}
			close(t1Enqueued)
			<-releaseT1
			return nil
		})
	}()
	<-t1Enqueued
	t2done := make(chan error, 1)
	go func() { t2done <- e.tryEnqueue(e.ctx, msg("t2", "d", "K")) }()
	// Give T2 the time to commit ahead of T1, if the store lets it.
	order := []string{"t1", "t2"} // T2 waits for T1's key: it commits after T1
	waiting := true
	select {
	case err := <-t2done:
		if err != nil {
			e.t.Fatal(err)
		}
		order, waiting = []string{"t2", "t1"}, false // committed while T1 was open
	case <-time.After(300 * time.Millisecond):
	}
	close(releaseT1)
	if err := <-t1done; err != nil {
		e.t.Fatal(err)
	}
	if waiting {
		if err := <-t2done; err != nil {
			e.t.Fatal(err)
		}
	}
	if got := e.fetch(); !slices.Equal(ids(got), order) {
		e.t.Fatalf("Seq order %v, commit order %v: the key's messages would go out out of commit order", ids(got), order)
	}
}

// testOtherKeysFlow: a transaction holding key K open does not hold up
// other keys, or messages without a key.
func testOtherKeysFlow(e *env) {
	if e.s.SerialWriters {
		e.t.Skip("one write transaction at a time")
	}
	enqueued := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- e.s.InTx(e.ctx, func(ctx context.Context, enq Enqueue) error {
			if err := enq(ctx, msg("k1", "d", "K")); err != nil {
				return err
			}
			close(enqueued)
			<-release
			return nil
		})
	}()
	<-enqueued
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	err := e.tryEnqueue(ctx, msg("l1", "d", "L"), msg("u1", "d", ""), msg("m1", "d", "M"))
	cancel()
	close(release)
	if err != nil {
		e.t.Fatalf("other keys waited for K's open transaction: %v", err)
	}
	if err := <-done; err != nil {
		e.t.Fatal(err)
	}
	if got := e.fetch(); !slices.Equal(ids(got), []string{"l1", "u1", "m1", "k1"}) && !slices.Equal(ids(got), []string{"k1", "l1", "u1", "m1"}) {
		e.t.Fatalf("records %v", ids(got))
	}
}

func testConcurrent(e *env) {
	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				key := fmt.Sprintf("key-%d", i%3)
				if err := e.tryEnqueue(e.ctx, msg(fmt.Sprintf("w%d-%02d", w, i), "d", key)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.t.Fatal(err)
	}
	got := e.fetch()
	if len(got) != workers*each {
		e.t.Fatalf("%d records, want %d", len(got), workers*each)
	}
	// Each worker's messages of one key keep the worker's order.
	last := map[string]string{}
	for _, r := range got {
		w, _, _ := strings.Cut(r.ID, "-")
		k := w + "/" + r.OrderingKey
		if prev, ok := last[k]; ok && prev > r.ID {
			e.t.Fatalf("%s after %s on key %s", r.ID, prev, r.OrderingKey)
		}
		last[k] = r.ID
	}
}

func testCancelled(e *env) {
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	if _, err := e.s.Store.Fetch(ctx, outbox.FetchRequest{Now: T0, Limit: 10}); err == nil {
		e.t.Error("Fetch with a cancelled context succeeded")
	}
	if _, err := e.s.Store.Lease(ctx, outbox.LeaseRequest{Owner: "a", Now: T0, Until: T0.Add(time.Second)}); err == nil {
		e.t.Error("Lease with a cancelled context succeeded")
	}
	if err := e.tryEnqueue(ctx, msg("x", "d", "")); err == nil {
		e.t.Error("Enqueue with a cancelled context succeeded")
	}
}
