package postgres_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/postgres"
	"github.com/idemgo/idem/store/storekit"
	"github.com/idemgo/idem/store/storetest"
)

// The record rules of the Store contract (lifetime, tokens, content, data
// errors) on the paths of this store that storetest does not reach one by
// one: the batch fast paths (plain insert, shared scalars, per-request
// arrays), Mark and MarkBatch, the deferred marker of
// MarkWithFirstStatement, and rows written by older versions. Each case runs
// on every configuration: a plain and a hash-partitioned table, and the
// simple protocol and exec mode with the deferred marker.

type edgeConfig struct {
	name string
	mk   func(t *testing.T) *postgres.Store
}

func edgeConfigs(t *testing.T) []edgeConfig {
	return []edgeConfig{
		{"plain", func(t *testing.T) *postgres.Store { return newStore(t, postgres.Options{}) }},
		{"partitioned", func(t *testing.T) *postgres.Store { return newStore(t, postgres.Options{Partitions: 4}) }},
		{"simple_protocol+first", modeStores(t, pgx.QueryExecModeSimpleProtocol)},
		{"exec+first", modeStores(t, pgx.QueryExecModeExec)},
	}
}

func TestEdges(t *testing.T) {
	cases := []struct {
		name string
		fn   func(t *testing.T, s *postgres.Store)
	}{
		{"TokensFromTheRequest", testEdgeTokens},
		{"FingerprintSticks", testEdgeFingerprintSticks},
		{"RawFingerprints", testEdgeRawFingerprints},
		{"InvalidData", testEdgeInvalidData},
		{"ZeroTimes", testEdgeZeroTimes},
		{"OldRowsLiveLease", testEdgeOldRows},
		{"HashedIDs", testEdgeHashedIDs},
	}
	for _, cfg := range edgeConfigs(t) {
		t.Run(cfg.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.fn(t, cfg.mk(t)) })
			}
		})
	}
}

func edgeKey(id string) idem.Key { return idem.Key{Scope: "edges", ID: id} }

// edgeReq is a claim at now with a 10s lease and an hour's retention, and
// the given NewToken (0: the store draws one through Prepare).
func edgeReq(id, fp string, now time.Time, token int64) idem.ClaimRequest {
	return idem.ClaimRequest{Key: edgeKey(id), Fingerprint: fp, Now: now, LeaseUntil: now.Add(10 * time.Second),
		ExpiresAt: now.Add(time.Hour), NewToken: token}
}

// markIn runs MarkBatch (or Mark for one request) in a transaction of InTx
// that commits.
func markIn(t *testing.T, s *postgres.Store, reqs ...idem.ClaimRequest) []idem.Claim {
	t.Helper()
	var out []idem.Claim
	err := s.InTx(context.Background(), func(ctx context.Context, tx pgx.Tx) error {
		if len(reqs) == 1 {
			c, err := s.Mark(ctx, tx, reqs[0])
			out = []idem.Claim{c}
			return err
		}
		var err error
		out, err = s.MarkBatch(ctx, tx, reqs)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func get(t *testing.T, s *postgres.Store, id string) idem.Record {
	t.Helper()
	r, err := s.Get(context.Background(), edgeKey(id))
	if err != nil {
		t.Fatalf("Get %s: %v", id, err)
	}
	return r
}

// A record that a claim or marker creates takes the request's NewToken, on
// every path; a record that exists counts on from its own token.
func testEdgeTokens(t *testing.T, s *postgres.Store) {
	ctx := context.Background()
	t0 := storetest.T0
	long := strings.Repeat("l", idem.MaxIDLen+1) // not the shared batch form
	const base = 1 << 40
	check := func(path string, reqs []idem.ClaimRequest, cs []idem.Claim) {
		t.Helper()
		for i, c := range cs {
			if c.Outcome != idem.ClaimAcquired || c.Record.Token != reqs[i].NewToken {
				t.Fatalf("%s %s: %v token %d, want acquired with the request's %d", path, reqs[i].Key.ID, c.Outcome, c.Record.Token, reqs[i].NewToken)
			}
			if r, err := s.Get(ctx, reqs[i].Key); err != nil || r.Token != reqs[i].NewToken {
				t.Fatalf("%s %s: stored %+v, %v", path, reqs[i].Key.ID, r, err)
			}
		}
	}
	one := edgeReq("claim", "fp", t0, base+1)
	c, err := s.Claim(ctx, one)
	if err != nil {
		t.Fatal(err)
	}
	check("Claim", []idem.ClaimRequest{one}, []idem.Claim{c})

	shared := []idem.ClaimRequest{edgeReq("b-1", "fp", t0, base+10), edgeReq("b-2", "fp", t0, base+20)}
	perReq := []idem.ClaimRequest{edgeReq("b-3", "fp", t0, base+30), edgeReq(long, "fp", t0, base+40)}
	for _, batch := range [][]idem.ClaimRequest{shared, perReq} {
		cs, err := s.ClaimBatch(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		check("ClaimBatch", batch, cs)
	}
	// Existing keys make the plain insert fail; the ON CONFLICT insert
	// writes the new ones with their own tokens.
	mixed := []idem.ClaimRequest{edgeReq("b-1", "fp", t0, base+11), edgeReq("b-4", "fp", t0, base+50), edgeReq("b-5", "fp", t0, base+60)}
	cs, err := s.ClaimBatch(ctx, mixed)
	if err != nil {
		t.Fatal(err)
	}
	if cs[0].Outcome != idem.ClaimInProgress || cs[0].Record.Token != base+10 {
		t.Fatalf("existing key in a batch: %v token %d", cs[0].Outcome, cs[0].Record.Token)
	}
	check("ClaimBatch on conflict", mixed[1:], cs[1:])

	m := edgeReq("mark", "fp", t0, base+70)
	check("Mark", []idem.ClaimRequest{m}, markIn(t, s, m))
	mb := []idem.ClaimRequest{edgeReq("mb-1", "fp", t0, base+80), edgeReq("mb-2", "fp", t0, base+90)}
	check("MarkBatch", mb, markIn(t, s, mb...))
	mbLong := []idem.ClaimRequest{edgeReq("mb-3", "fp", t0, base+100), edgeReq(long+"m", "fp", t0, base+110)}
	check("MarkBatch per request", mbLong, markIn(t, s, mbLong...))

	// A record that exists, expired, counts on from its token whatever the
	// request's NewToken (released first: only settled records expire).
	if err := s.Release(ctx, idem.ReleaseRequest{Key: one.Key, Token: base + 1, Now: t0}); err != nil {
		t.Fatal(err)
	}
	later := t0.Add(2 * time.Hour)
	again := edgeReq("claim", "fp", later, base+999)
	if c, err := s.Claim(ctx, again); err != nil || c.Outcome != idem.ClaimAcquired || c.Record.Token != base+2 {
		t.Fatalf("claim of the expired record: %v token %d, %v; want %d", c.Outcome, c.Record.Token, err, base+2)
	}
	if cs := markIn(t, s, edgeReq("mark", "fp", later, base+999)); cs[0].Record.Token != base+71 {
		t.Fatalf("marker over the expired marker: token %d, want %d", cs[0].Record.Token, base+71)
	}

	// Requests without a NewToken: Prepare draws one per request (never 1,
	// never shared by two requests of a batch).
	drawn := []idem.ClaimRequest{edgeReq("d-1", "fp", t0, 0), edgeReq("d-2", "fp", t0, 0)}
	cs, err = s.ClaimBatch(ctx, drawn)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := cs[0].Record.Token, cs[1].Record.Token; a < 1<<32 || b < 1<<32 || a == b || get(t, s, "d-1").Token != a {
		t.Fatalf("drawn tokens %d and %d", a, b)
	}

	// DoTx: the deferred marker (or Mark) writes the token of the claim
	// the guard reports.
	g, err := idem.New(s, idem.Options{Scope: "edges", Clock: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	res, err := idem.DoTx(ctx, g, idem.Message{ID: "dotx", Payload: []byte("p")}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		_, err := tx.Exec(ctx, `SELECT 1`)
		return nil, err
	})
	if err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("DoTx: %v, %v", res.Outcome, err)
	}
	if r := get(t, s, "dotx"); r.Token < 1<<32 || r.Token != res.Record.Token {
		t.Fatalf("DoTx's marker token %d, reported %d", r.Token, res.Record.Token)
	}
}

// A released record keeps the fingerprint it was first claimed with, on
// every path that takes it again (Claim, ClaimBatch, Mark, MarkBatch, DoTx
// with the deferred marker); one released without a fingerprint takes the
// request's; a stale retake keeps the stored one; an expired record takes
// the request's.
func testEdgeFingerprintSticks(t *testing.T, s *postgres.Store) {
	ctx := context.Background()
	t0 := storetest.T0
	released := func(id, fp string) {
		t.Helper()
		c, err := s.Claim(ctx, edgeReq(id, fp, t0, 0))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, idem.ReleaseRequest{Key: edgeKey(id), Token: c.Record.Token, Now: t0}); err != nil {
			t.Fatal(err)
		}
		if r := get(t, s, id); r.State != idem.StateReleased || r.Fingerprint != fp {
			t.Fatalf("released %s: %+v", id, r)
		}
	}
	at := t0.Add(time.Second)
	paths := map[string]func(id, fp string) idem.Claim{
		"Claim": func(id, fp string) idem.Claim {
			c, err := s.Claim(ctx, edgeReq(id, fp, at, 0))
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
		"ClaimBatch": func(id, fp string) idem.Claim {
			cs, err := s.ClaimBatch(ctx, []idem.ClaimRequest{edgeReq(id, fp, at, 0), edgeReq(id+"-new", fp, at, 0)})
			if err != nil {
				t.Fatal(err)
			}
			return cs[0]
		},
		"Mark": func(id, fp string) idem.Claim { return markIn(t, s, edgeReq(id, fp, at, 0))[0] },
		"MarkBatch": func(id, fp string) idem.Claim {
			return markIn(t, s, edgeReq(id, fp, at, 0), edgeReq(id+"-new", fp, at, 0))[0]
		},
	}
	for name, claim := range paths {
		id := "rel-" + name
		released(id, "A")
		c := claim(id, "B")
		if c.Outcome != idem.ClaimAcquired || c.Record.Fingerprint != "A" || get(t, s, id).Fingerprint != "A" {
			t.Fatalf("%s over a released record: %v %+v; want acquired with the stored fingerprint A", name, c.Outcome, c.Record)
		}
		empty := "empty-" + name
		released(empty, "")
		if c := claim(empty, "B"); c.Record.Fingerprint != "B" || get(t, s, empty).Fingerprint != "B" {
			t.Fatalf("%s over a record released without a fingerprint: %+v; want the request's", name, c.Record)
		}
		exp := "exp-" + name // completed long ago: expired
		if c, err := s.Claim(ctx, edgeReq(exp, "A", t0.Add(-2*time.Hour), 0)); err != nil {
			t.Fatal(err)
		} else if err := s.Complete(ctx, idem.CompleteRequest{Key: edgeKey(exp), Token: c.Record.Token, Now: t0.Add(-2 * time.Hour), ExpiresAt: t0.Add(-time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if c := claim(exp, "B"); c.Outcome != idem.ClaimAcquired || c.Record.Fingerprint != "B" || c.Record.Attempts != 1 {
			t.Fatalf("%s over an expired record: %v %+v; want a new lifetime with the request's fingerprint", name, c.Outcome, c.Record)
		}
	}
	// A stale retake keeps the stored fingerprint (one statement and the batch).
	for i, retake := range []func(req idem.ClaimRequest) idem.Claim{
		func(req idem.ClaimRequest) idem.Claim {
			c, err := s.Claim(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
		func(req idem.ClaimRequest) idem.Claim {
			cs, err := s.ClaimBatch(ctx, []idem.ClaimRequest{req})
			if err != nil {
				t.Fatal(err)
			}
			return cs[0]
		},
	} {
		id := "stale-" + string(rune('a'+i))
		if _, err := s.Claim(ctx, edgeReq(id, "A", t0, 0)); err != nil {
			t.Fatal(err)
		}
		req := edgeReq(id, "B", t0.Add(time.Minute), 0)
		req.TakeOverStale = true
		if c := retake(req); !c.Retaken || c.Record.Fingerprint != "A" {
			t.Fatalf("stale retake %d: %+v", i, c)
		}
	}

	// DoTx (the deferred marker where configured) over a released two-phase
	// claim with other content: a conflict, nothing committed, the
	// fingerprint kept; the original content goes through.
	g, err := idem.New(s, idem.Options{Scope: "edges", Clock: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(ctx, idem.Message{ID: "dotx", Payload: []byte("A")}, func(context.Context) ([]byte, error) {
		return nil, errors.New("transient")
	}); err == nil {
		t.Fatal("the failing handler reported no error")
	}
	before := get(t, s, "dotx")
	ledger := newBusinessTable(t, s)
	write := func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		_, err := tx.Exec(ctx, `INSERT INTO `+ledger+` (msg, amount) VALUES ('dotx', 1)`)
		return nil, err
	}
	res, err := idem.DoTx(ctx, g, idem.Message{ID: "dotx", Payload: []byte("B")}, write)
	if !errors.Is(err, idem.ErrConflict) {
		t.Fatalf("DoTx with other content over the released claim: %v, %v; want a conflict", res.Outcome, err)
	}
	if r := get(t, s, "dotx"); r.State != idem.StateReleased || r.Fingerprint != before.Fingerprint || r.Token != before.Token {
		t.Fatalf("after the conflict: %+v, before %+v", r, before)
	}
	res, err = idem.DoTx(ctx, g, idem.Message{ID: "dotx", Payload: []byte("A")}, write)
	if err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("the original content: %v, %v", res.Outcome, err)
	}
	var n int
	if err := testPool(t).QueryRow(ctx, `SELECT count(*) FROM `+ledger).Scan(&n); err != nil || n != 1 {
		t.Fatalf("ledger rows %d, %v; want the original's one", n, err)
	}
}

// Raw digest bytes as fingerprints go through every path (the batch fast
// paths and the deferred marker included) as the text Prepare makes of
// them, and the same bytes are recognised again.
func testEdgeRawFingerprints(t *testing.T, s *postgres.Store) {
	ctx := context.Background()
	t0 := storetest.T0
	raw := func(id string) string { sum := sha256.Sum256([]byte(id)); return string(sum[:]) + "\x00\xff" }
	long := strings.Repeat("r", idem.MaxIDLen+1)
	req := func(id string) idem.ClaimRequest { return edgeReq(id, raw(id), t0, 0) }
	stored := func(path string, ids ...string) {
		t.Helper()
		for _, id := range ids {
			if r := get(t, s, id); r.Fingerprint != storekit.StoredFingerprint(raw(id)) {
				t.Fatalf("%s %.20s: stored fingerprint %q", path, id, r.Fingerprint)
			}
		}
	}
	if _, err := s.Claim(ctx, req("c")); err != nil {
		t.Fatal(err)
	}
	stored("Claim", "c")
	for _, ids := range [][]string{{"s-1", "s-2"}, {"p-1", long}} {
		if _, err := s.ClaimBatch(ctx, []idem.ClaimRequest{req(ids[0]), req(ids[1])}); err != nil {
			t.Fatal(err)
		}
		stored("ClaimBatch", ids...)
	}
	// Again: duplicates of the same content, through the full statement.
	cs, err := s.ClaimBatch(ctx, []idem.ClaimRequest{req("s-1"), req("s-3")})
	if err != nil || cs[0].Outcome != idem.ClaimInProgress || cs[0].Record.Fingerprint != storekit.StoredFingerprint(raw("s-1")) {
		t.Fatalf("ClaimBatch again: %+v, %v", cs, err)
	}
	markIn(t, s, req("m"))
	markIn(t, s, req("mb-1"), req("mb-2"))
	markIn(t, s, req("mb-3"), req(long+"m"))
	stored("Mark", "m", "mb-1", "mb-2", "mb-3", long+"m")
	if c := markIn(t, s, req("m"))[0]; c.Outcome != idem.ClaimDuplicate || c.Record.Fingerprint != storekit.StoredFingerprint(raw("m")) {
		t.Fatalf("Mark again: %+v", c)
	}
	// The guard with a FingerprintFunc returning raw bytes, through DoTx.
	g, err := idem.New(s, idem.Options{Scope: "edges", Clock: func() time.Time { return t0 },
		Fingerprint: func(m idem.Message) (string, error) { return raw(string(m.Payload)), nil }})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []idem.Outcome{idem.OutcomeProcessed, idem.OutcomeDuplicate} {
		res, err := idem.DoTx(ctx, g, idem.Message{ID: "dotx", Payload: []byte("dotx")}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			_, err := tx.Exec(ctx, `SELECT 1`)
			return nil, err
		})
		if err != nil || res.Outcome != want {
			t.Fatalf("DoTx #%d with a raw fingerprint: %v, %v; want %v", i+1, res.Outcome, err, want)
		}
	}
	stored("DoTx", "dotx")
}

// A value the server cannot take (here a time past timestamptz's range,
// SQLSTATE 22008) is an *idem.InvalidDataError, permanent, on every
// operation; DoTx reports it as permanent and commits nothing.
func testEdgeInvalidData(t *testing.T, s *postgres.Store) {
	ctx := context.Background()
	t0 := storetest.T0
	far := time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)
	bad := func(id string) idem.ClaimRequest {
		r := edgeReq(id, "fp", t0, 0)
		r.ExpiresAt = far
		return r
	}
	want := func(op string, err error) {
		t.Helper()
		var de *idem.InvalidDataError
		if !errors.As(err, &de) || de.Op != op || !errors.Is(err, idem.ErrInvalidData) || !idem.IsPermanent(err) {
			t.Fatalf("%s with a time out of range: %v; want an *idem.InvalidDataError for %s", op, err, op)
		}
		var pe interface{ SQLState() string }
		if !errors.As(err, &pe) || !strings.HasPrefix(pe.SQLState(), "22") {
			t.Fatalf("%s: the driver's error is not reachable: %v", op, err)
		}
	}
	_, err := s.Claim(ctx, bad("c"))
	want("claim", err)
	_, err = s.ClaimBatch(ctx, []idem.ClaimRequest{bad("b-1"), bad("b-2")})
	want("claim batch", err)
	inTx := func(fn func(ctx context.Context, tx pgx.Tx) error) error { return s.InTx(ctx, fn) }
	want("mark", inTx(func(ctx context.Context, tx pgx.Tx) error { _, err := s.Mark(ctx, tx, bad("m")); return err }))
	want("mark batch", inTx(func(ctx context.Context, tx pgx.Tx) error {
		_, err := s.MarkBatch(ctx, tx, []idem.ClaimRequest{bad("mb-1"), bad("mb-2")})
		return err
	}))
	c, err := s.Claim(ctx, edgeReq("ok", "fp", t0, 0))
	if err != nil {
		t.Fatal(err)
	}
	want("complete", s.Complete(ctx, idem.CompleteRequest{Key: edgeKey("ok"), Token: c.Record.Token, Now: t0, ExpiresAt: far}))
	want("renew", s.Renew(ctx, idem.RenewRequest{Key: edgeKey("ok"), Token: c.Record.Token, Now: t0, LeaseUntil: far}))
	for _, id := range []string{"c", "b-1", "m", "mb-1"} {
		if _, err := s.Get(ctx, edgeKey(id)); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("%s written: %v", id, err)
		}
	}
	// Through the guard, with a clock past the range.
	g, err := idem.New(s, idem.Options{Scope: "edges", Clock: func() time.Time { return far }})
	if err != nil {
		t.Fatal(err)
	}
	ledger := newBusinessTable(t, s)
	res, err := idem.DoTx(ctx, g, idem.Message{ID: "dotx"}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		_, err := tx.Exec(ctx, `INSERT INTO `+ledger+` (msg, amount) VALUES ('dotx', 1)`)
		return nil, err
	})
	if !errors.Is(err, idem.ErrInvalidData) || !idem.IsPermanent(err) {
		t.Fatalf("DoTx with a retention past the range: %v, %v; want a permanent invalid-data error", res.Outcome, err)
	}
	var n int
	if err := testPool(t).QueryRow(ctx, `SELECT count(*) FROM `+ledger).Scan(&n); err != nil || n != 0 {
		t.Fatalf("ledger rows %d, %v; want none", n, err)
	}
}

// Requests without their times are rejected before anything is sent, on
// the inbox paths too (Mark, MarkBatch, DeferMark).
func testEdgeZeroTimes(t *testing.T, s *postgres.Store) {
	ctx := context.Background()
	zero := edgeReq("z", "fp", storetest.T0, 0)
	zero.ExpiresAt = time.Time{}
	ok := edgeReq("z-ok", "fp", storetest.T0, 0)
	for name, fn := range map[string]func(ctx context.Context, tx pgx.Tx) error{
		"Mark": func(ctx context.Context, tx pgx.Tx) error { _, err := s.Mark(ctx, tx, zero); return err },
		"MarkBatch": func(ctx context.Context, tx pgx.Tx) error {
			_, err := s.MarkBatch(ctx, tx, []idem.ClaimRequest{ok, zero})
			return err
		},
		"DeferMark": func(ctx context.Context, tx pgx.Tx) error {
			_, deferred, err := s.DeferMark(ctx, tx, zero)
			if err == nil && !deferred {
				_, err = s.Mark(ctx, tx, zero)
			}
			return err
		},
	} {
		if err := s.InTx(ctx, fn); !errors.Is(err, idem.ErrInvalidData) {
			t.Fatalf("%s with zero ExpiresAt: %v; want ErrInvalidData", name, err)
		}
	}
	if _, err := s.ClaimBatch(ctx, []idem.ClaimRequest{ok, zero}); !errors.Is(err, idem.ErrInvalidData) {
		t.Fatalf("ClaimBatch with zero ExpiresAt: %v", err)
	}
	for _, id := range []string{"z", "z-ok"} {
		if _, err := s.Get(ctx, edgeKey(id)); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("%s written: %v", id, err)
		}
	}
}

// Rows written before Renew carried the expiry with the lease: an
// in-progress row whose expires_at passed while its lease is live is not
// expired for claims, markers, batches, sweeps or stats.
func testEdgeOldRows(t *testing.T, s *postgres.Store) {
	ctx := context.Background()
	t0 := storetest.T0
	now := t0.Add(2 * time.Hour)
	for _, id := range []string{"old-1", "old-2"} {
		if _, err := testPool(t).Exec(ctx, `INSERT INTO `+s.Table()+`
			(scope, id, state, fingerprint, token, attempts, lease_until, expires_at, sweep_at, created_at, updated_at)
			VALUES ('edges', $1, 1, 'fp', 7, 1, $2, $3, $4, $5, $5)`,
			id, now.Add(time.Minute), t0.Add(time.Hour), t0.Add(time.Hour+time.Minute), t0); err != nil {
			t.Fatal(err)
		}
	}
	take := edgeReq("old-1", "other", now, 0)
	take.TakeOverStale = true
	if c, err := s.Claim(ctx, take); err != nil || c.Outcome != idem.ClaimInProgress {
		t.Fatalf("Claim over a live lease past its retention: %v, %v", c.Outcome, err)
	}
	if cs, err := s.ClaimBatch(ctx, []idem.ClaimRequest{take, edgeReq("old-new", "fp", now, 0)}); err != nil || cs[0].Outcome != idem.ClaimInProgress {
		t.Fatalf("ClaimBatch over a live lease past its retention: %+v, %v", cs, err)
	}
	if c := markIn(t, s, edgeReq("old-2", "fp", now, 0))[0]; c.Outcome != idem.ClaimInProgress {
		t.Fatalf("Mark over a live lease past its retention: %v", c.Outcome)
	}
	if cs := markIn(t, s, edgeReq("old-2", "fp", now, 0), edgeReq("old-new-2", "fp", now, 0)); cs[0].Outcome != idem.ClaimInProgress {
		t.Fatalf("MarkBatch over a live lease past its retention: %v", cs[0].Outcome)
	}
	if n, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: 10}); err != nil || n != 0 {
		t.Fatalf("Sweep = %d, %v; want 0", n, err)
	}
	st, err := s.Stats(ctx, now)
	if err != nil || len(st) != 1 || st[0].Expired != 0 || st[0].InProgress != 3 || st[0].Stale != 0 {
		t.Fatalf("Stats = %+v, %v; want 3 in progress (the old rows and old-new), none stale or expired", st, err)
	}
	for _, id := range []string{"old-1", "old-2"} {
		if r := get(t, s, id); r.Token != 7 || r.Fingerprint != "fp" {
			t.Fatalf("%s changed: %+v", id, r)
		}
	}
	// Once the lease ends, the row is stale, never expired: a claim asks
	// the Stale policy (here: park), a retake counts on from its token and
	// keeps its fingerprint, and the sweep leaves it.
	end := now.Add(time.Minute)
	if c, err := s.Claim(ctx, edgeReq("old-1", "other", end, 0)); err != nil || c.Outcome != idem.ClaimStale || c.Record.Token != 7 {
		t.Fatalf("Claim after the lease: %+v, %v; want stale", c, err)
	}
	take = edgeReq("old-1", "other", end, 0)
	take.TakeOverStale = true
	if c, err := s.Claim(ctx, take); err != nil || c.Outcome != idem.ClaimAcquired || !c.Retaken ||
		c.Record.Token != 8 || c.Record.Fingerprint != "fp" || c.Record.Attempts != 2 {
		t.Fatalf("retake after the lease: %+v, %v", c, err)
	}
	if n, err := s.Sweep(ctx, idem.SweepRequest{Now: end, Limit: 10}); err != nil || n != 0 {
		t.Fatalf("Sweep after the lease = %d, %v; want 0 (old-2 is stale)", n, err)
	}
}

// Ids spelled like a digest are stored hashed with the original kept for
// display, on the batch and marker paths too.
func testEdgeHashedIDs(t *testing.T, s *postgres.Store) {
	ctx := context.Background()
	t0 := storetest.T0
	ids := []string{"sha256:0123", "sha256:" + strings.Repeat("a", 64), "plain"}
	var reqs []idem.ClaimRequest
	for _, id := range ids {
		reqs = append(reqs, edgeReq(id, "fp", t0, 0))
	}
	if _, err := s.ClaimBatch(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	var marks []idem.ClaimRequest
	for _, id := range ids {
		marks = append(marks, edgeReq("m-"+id, "fp", t0, 0), edgeReq(id+"-m", "fp", t0, 0))
	}
	markIn(t, s, marks...)
	for _, r := range append(reqs, marks...) {
		got, err := s.Get(ctx, r.Key)
		if err != nil || got.ID != r.Key.StoredID() || got.Key() != r.Key {
			t.Fatalf("%s stored as %q / %q, %v", r.Key.ID, got.ID, got.DisplayID, err)
		}
	}
}
