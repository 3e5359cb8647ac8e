package integration_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/idemgo/idem"
	mongoidem "github.com/idemgo/idem/store/mongo"
	"github.com/idemgo/idem/store/storetest"
)

func claimReq(k idem.Key, now time.Time) idem.ClaimRequest {
	return idem.ClaimRequest{Key: k, Fingerprint: "fp", Now: now, LeaseUntil: now.Add(10 * time.Second), ExpiresAt: now.Add(time.Hour)}
}

// TestServerDown: every operation against a closed port is an error, never
// an outcome, and retryable; the guard neither runs the handler nor acks.
func TestServerDown(t *testing.T) {
	c, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + closedAddr(t) + "/").
		SetServerSelectionTimeout(300 * time.Millisecond).SetConnectTimeout(300 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect(context.Background())
	s, err := mongoidem.New(c.Database("app"), mongoidem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	k := idem.Key{Scope: "s", ID: "down"}
	if cl, err := s.Claim(ctx, claimReq(k, now)); err == nil || cl.Outcome == idem.ClaimAcquired || idem.IsPermanent(err) {
		t.Fatalf("Claim = %v, %v; want a retryable error", cl.Outcome, err)
	}
	if cls, err := s.ClaimBatch(ctx, []idem.ClaimRequest{claimReq(k, now)}); err == nil || cls != nil || idem.IsPermanent(err) {
		t.Fatalf("ClaimBatch = %v, %v; want a retryable error", cls, err)
	}
	for name, err := range map[string]error{
		"Complete": s.Complete(ctx, idem.CompleteRequest{Key: k, Token: 1, Now: now, ExpiresAt: now.Add(time.Hour)}),
		"Release":  s.Release(ctx, idem.ReleaseRequest{Key: k, Token: 1, Now: now}),
		"Renew":    s.Renew(ctx, idem.RenewRequest{Key: k, Token: 1, Now: now, LeaseUntil: now.Add(time.Minute)}),
		"InTx":     s.InTx(ctx, func(context.Context, *mongo.Session) error { return nil }),
	} {
		if err == nil || errors.Is(err, idem.ErrLeaseLost) || idem.IsPermanent(err) {
			t.Errorf("%s = %v; want a retryable error", name, err)
		}
	}
	if _, err := s.Get(ctx, k); err == nil || errors.Is(err, idem.ErrNotFound) {
		t.Errorf("Get = %v; want a connection error", err)
	}
	if _, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: 10}); err == nil {
		t.Error("Sweep succeeded against a closed port")
	}
	if _, err := s.List(ctx, idem.ListFilter{}); err == nil {
		t.Error("List succeeded against a closed port")
	}
	if _, err := s.Stats(ctx, now); err == nil {
		t.Error("Stats succeeded against a closed port")
	}
	g, err := idem.New(s, idem.Options{Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := g.Do(ctx, idem.Message{ID: "m1", Payload: []byte("x")}, func(context.Context) ([]byte, error) {
		t.Fatal("handler ran without a claim")
		return nil, nil
	})
	if idem.Decide(res, err) != idem.ActionRetry {
		t.Fatalf("Do with the server down = %v, %v; want retry", res.Outcome, err)
	}
}

// TestResultOverLimit: a result that would take the record past the server's
// 16 MiB document limit is invalid data (permanent), refused before it is
// sent; the record stays in progress. (FerretDB v1 would store it.)
func TestResultOverLimit(t *testing.T) {
	c := newClient(t)
	s := newStore(t, c, mongoidem.Options{})
	ctx := context.Background()
	k := idem.Key{Scope: "s", ID: "big"}
	cl, err := s.Claim(ctx, claimReq(k, storetest.T0))
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{1}, 16<<20)
	err = s.Complete(ctx, idem.CompleteRequest{Key: k, Token: cl.Record.Token, Result: big, Now: storetest.T0, ExpiresAt: storetest.T0.Add(time.Hour)})
	if !errors.Is(err, idem.ErrInvalidData) || !idem.IsPermanent(err) {
		t.Fatalf("Complete with a 16 MiB result = %v; want ErrInvalidData", err)
	}
	if r, _ := s.Get(ctx, k); r.State != idem.StateInProgress {
		t.Fatalf("after the refused Complete: %+v", r)
	}
	// The largest result that fits goes in and comes back.
	fits := bytes.Repeat([]byte{2}, 15<<20)
	if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: cl.Record.Token, Result: fits, Now: storetest.T0, ExpiresAt: storetest.T0.Add(time.Hour)}); err != nil {
		t.Fatalf("Complete with a 15 MiB result: %v", err)
	}
	if r, err := s.Get(ctx, k); err != nil || !bytes.Equal(r.Result, fits) {
		t.Fatalf("15 MiB result came back as %d bytes, %v", len(r.Result), err)
	}
}

// TestTimesBeyondBSON: a time a BSON date cannot hold is invalid data.
func TestTimesBeyondBSON(t *testing.T) {
	c := newClient(t)
	s := newStore(t, c, mongoidem.Options{})
	far := time.Date(300_000_000, 1, 1, 0, 0, 0, 0, time.UTC)
	req := claimReq(idem.Key{Scope: "s", ID: "far"}, storetest.T0)
	req.ExpiresAt = far
	if _, err := s.Claim(context.Background(), req); !errors.Is(err, idem.ErrInvalidData) {
		t.Fatalf("Claim expiring in year 300,000,000: %v; want ErrInvalidData", err)
	}
}

// TestForeignDocument: a document at a record's _id that is not a record is
// invalid data for every operation, and is never claimed over or swept.
func TestForeignDocument(t *testing.T) {
	c := newClient(t)
	s := newStore(t, c, mongoidem.Options{})
	ctx := context.Background()
	k := idem.Key{Scope: "s", ID: "foreign"}
	id := k.Scope + "\x00" + k.ID
	if _, err := s.Collection().InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "state", Value: 42}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, claimReq(k, storetest.T0)); !errors.Is(err, idem.ErrInvalidData) {
		t.Fatalf("Claim over a foreign document = %v; want ErrInvalidData", err)
	}
	if _, err := s.Get(ctx, k); !errors.Is(err, idem.ErrInvalidData) {
		t.Fatalf("Get of a foreign document = %v; want ErrInvalidData", err)
	}
	if _, err := s.Sweep(ctx, idem.SweepRequest{Now: storetest.T0.Add(1000 * time.Hour), Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Collection().CountDocuments(ctx, bson.D{{Key: "_id", Value: id}}); n != 1 {
		t.Fatal("the foreign document was deleted")
	}
}

// TestTTLAtFromServerClock: the ttl_at the TTL index reads is the server's
// clock plus the retention measured by the caller's clock, whatever the
// caller's clock says: an hour behind or ahead, or years away (storetest's
// T0), the record is kept for its retention by the server's clock. An
// in-progress record has no ttl_at (it never expires): its claim holds that
// time in ttl_hold, a renewal carries it, and the release makes it ttl_at.
func TestTTLAtFromServerClock(t *testing.T) {
	c := newClient(t)
	s := newStore(t, c, mongoidem.Options{})
	ctx := context.Background()
	for i, callerNow := range []time.Time{time.Now().Add(-time.Hour), time.Now().Add(time.Hour), storetest.T0} {
		k := idem.Key{Scope: "s", ID: fmt.Sprintf("ttl-%d", i)}
		req := claimReq(k, callerNow)
		req.ExpiresAt = callerNow.Add(10 * time.Minute)
		before := time.Now()
		cl, err := s.Claim(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			TTLAt   *time.Time `bson:"ttl_at"`
			TTLHold *time.Time `bson:"ttl_hold"`
		}
		read := func() {
			t.Helper()
			d.TTLAt, d.TTLHold = nil, nil
			if err := s.Collection().FindOne(ctx, bson.D{{Key: "_id", Value: "s\x00" + k.ID}}).Decode(&d); err != nil {
				t.Fatal(err)
			}
		}
		read()
		// This machine is the server's: its clock is the server's.
		lo, hi := before.Add(10*time.Minute), time.Now().Add(10*time.Minute+2*time.Minute)
		if d.TTLAt != nil || d.TTLHold == nil || d.TTLHold.Before(lo) || d.TTLHold.After(hi) {
			t.Fatalf("caller clock %v: in progress with ttl_at %v, ttl_hold %v; want no ttl_at and ttl_hold within [%v, %v]",
				callerNow, d.TTLAt, d.TTLHold, lo, hi)
		}
		// A renewal past the retention carries the held time with it.
		if err := s.Renew(ctx, idem.RenewRequest{Key: k, Token: cl.Record.Token, Now: callerNow, LeaseUntil: callerNow.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		read()
		if d.TTLAt != nil || d.TTLHold == nil || d.TTLHold.Before(before.Add(time.Hour)) {
			t.Fatalf("after a renewal an hour ahead: ttl_at %v, ttl_hold %v", d.TTLAt, d.TTLHold)
		}
		held := *d.TTLHold
		if err := s.Release(ctx, idem.ReleaseRequest{Key: k, Token: cl.Record.Token, Now: callerNow}); err != nil {
			t.Fatal(err)
		}
		read()
		if d.TTLHold != nil || d.TTLAt == nil || !d.TTLAt.Equal(held) {
			t.Fatalf("after the release: ttl_at %v, ttl_hold %v; want ttl_at %v", d.TTLAt, d.TTLHold, held)
		}
	}
}

// TestMigrateTTL: Migrate is idempotent and reports the TTL index; where the
// server refuses TTL indexes TTLRequired fails and says what to do.
func TestMigrateTTL(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	s := newStore(t, c, mongoidem.Options{})
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	present, reason := s.TTL()
	t.Logf("TTL index present: %v (%s)", present, reason)
	strict := newStore(t, c, mongoidem.Options{TTLIndex: mongoidem.TTLNone})
	if p, r := strict.TTL(); p || r == "" {
		t.Fatalf("TTLNone: TTL() = %v %q", p, r)
	}
	req, err := mongoidem.New(testDB(c), mongoidem.Options{Collection: uniqueCollection(), TTLIndex: mongoidem.TTLRequired})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { req.Drop(context.Background()) })
	err = req.Migrate(ctx)
	if present && err != nil {
		t.Fatalf("TTLRequired on a server with TTL indexes: %v", err)
	}
	if !present && (err == nil || !bytes.Contains([]byte(err.Error()), []byte("TTLNone"))) {
		t.Fatalf("TTLRequired on a server without TTL indexes: %v; want an error naming TTLNone", err)
	}
}

// TestConcurrentCompletesAndRetakes: owners completing while others retake
// their stale records: for every key exactly one of each pair wins, and the
// record says which. On FerretDB v1 this holds through the store's key
// locks.
func TestConcurrentCompletesAndRetakes(t *testing.T) {
	c := newClient(t)
	s := newStore(t, c, mongoidem.Options{})
	ctx := context.Background()
	const keys = 40
	var wg sync.WaitGroup
	for i := range keys {
		k := idem.Key{Scope: "race", ID: fmt.Sprintf("k%d", i)}
		first, err := s.Claim(ctx, claimReq(k, storetest.T0))
		if err != nil {
			t.Fatal(err)
		}
		later := storetest.T0.Add(11 * time.Second)
		var completed, retaken bool
		var retake idem.Claim
		wg.Add(2)
		go func() {
			defer wg.Done()
			err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: first.Record.Token, Now: later, ExpiresAt: later.Add(time.Hour)})
			completed = err == nil
			if err != nil && !errors.Is(err, idem.ErrLeaseLost) {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			c, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Fingerprint: "fp", Now: later, LeaseUntil: later.Add(10 * time.Second),
				ExpiresAt: later.Add(time.Hour), TakeOverStale: true})
			if err != nil {
				t.Error(err)
			}
			retake, retaken = c, c.Outcome == idem.ClaimAcquired
		}()
		wg.Wait()
		r, err := s.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case completed == retaken:
			t.Fatalf("%s: completed %v and retaken %v (record %+v)", k, completed, retaken, r)
		case completed && (r.State != idem.StateCompleted || r.Token != first.Record.Token):
			t.Fatalf("%s: completion won but the record is %+v", k, r)
		case retaken && (r.State != idem.StateInProgress || r.Token != retake.Record.Token):
			t.Fatalf("%s: retake won but the record is %+v", k, r)
		}
	}
}
