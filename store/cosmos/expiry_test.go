package cosmos_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/cosmos"
	"github.com/idemgo/idem/store/cosmos/cosmostest"
	"github.com/idemgo/idem/store/storetest"
)

// ownServer returns a store on a cosmostest server of the test's own,
// whose clock stands still until the test moves it (Advance).
func ownServer(t *testing.T) (*cosmostest.Server, *cosmos.Store) {
	t.Helper()
	at := time.Now()
	return ownStore(t, cosmostest.Options{Now: func() time.Time { return at }})
}

// item reads the record of k as the container holds it.
func item(t *testing.T, s *cosmos.Store, k idem.Key) (map[string]any, error) {
	t.Helper()
	q := s.Container().NewQueryItemsPager("SELECT * FROM c WHERE c.scope = @scope AND c.sid = @id", azcosmos.NewPartitionKey(),
		&azcosmos.QueryOptions{QueryParameters: []azcosmos.QueryParameter{{Name: "@scope", Value: k.Scope}, {Name: "@id", Value: k.StoredID()}}})
	for q.More() {
		page, err := q.NextPage(context.Background())
		if err != nil {
			return nil, err
		}
		for _, it := range page.Items {
			var m map[string]any
			if err := json.Unmarshal(it, &m); err != nil {
				t.Fatal(err)
			}
			return m, nil
		}
	}
	return nil, idem.ErrNotFound
}

// Native expiry: an in-progress record carries ttl -1 and never expires,
// however long its lease has been over; a completed or released record
// carries the seconds its retention leaves (from the request's Now, not
// the server's clock) and is gone when they have passed.
func TestNativeExpiry(t *testing.T) {
	srv, s := ownServer(t)
	ctx := context.Background()
	now := storetest.T0 // the callers' clock: years from the server's
	claim := func(id string) idem.Claim {
		c, err := s.Claim(ctx, idem.ClaimRequest{Key: idem.Key{Scope: "x", ID: id}, Now: now,
			LeaseUntil: now.Add(10 * time.Second), ExpiresAt: now.Add(time.Hour)})
		if err != nil || c.Outcome != idem.ClaimAcquired {
			t.Fatalf("Claim(%s) = %v, %v", id, c.Outcome, err)
		}
		return c
	}
	held, done, released := claim("held"), claim("done"), claim("released")
	if err := s.Complete(ctx, idem.CompleteRequest{Key: idem.Key{Scope: "x", ID: "done"}, Token: done.Record.Token, Now: now, ExpiresAt: now.Add(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, idem.ReleaseRequest{Key: idem.Key{Scope: "x", ID: "released"}, Token: released.Record.Token, Now: now.Add(30 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]float64{"held": -1, "done": 7200, "released": 1800} {
		m, err := item(t, s, idem.Key{Scope: "x", ID: id})
		if err != nil || m["ttl"] != want {
			t.Fatalf("the %s record's ttl = %v (%v); want %v", id, m["ttl"], err, want)
		}
	}
	srv.Advance(30*time.Minute + time.Second)
	if _, err := s.Get(ctx, idem.Key{Scope: "x", ID: "released"}); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("the released record after the retention it had left: %v; want it gone", err)
	}
	if _, err := s.Get(ctx, idem.Key{Scope: "x", ID: "done"}); err != nil {
		t.Fatalf("the completed record within its retention: %v", err)
	}
	srv.Advance(2 * time.Hour)
	if _, err := s.Get(ctx, idem.Key{Scope: "x", ID: "done"}); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("the completed record after its retention: %v; want it gone", err)
	}
	srv.Advance(1000 * time.Hour)
	r, err := s.Get(ctx, idem.Key{Scope: "x", ID: "held"})
	if err != nil || r.State != idem.StateInProgress || r.Token != held.Record.Token {
		t.Fatalf("the in-progress record 1000 hours on: %+v, %v; want it kept", r, err)
	}
	// A renewal keeps it without a ttl; its claim after the key's lease
	// ended is stale, never a new lifetime.
	if err := s.Renew(ctx, idem.RenewRequest{Key: idem.Key{Scope: "x", ID: "held"}, Token: held.Record.Token, Now: now, LeaseUntil: now.Add(3 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if m, _ := item(t, s, idem.Key{Scope: "x", ID: "held"}); m["ttl"] != -1.0 || m["exp"] != float64(now.Add(3*time.Hour).UnixMilli()) {
		t.Fatalf("after a renewal past the retention: ttl %v exp %v; want -1 and the lease end", m["ttl"], m["exp"])
	}
}

// Throttling: the client waits out a 429's x-ms-retry-after-ms and
// retries; past its retries the store returns the 429 as a store failure
// (retryable, never invalid data), and goes on once the account does.
func TestThrottled(t *testing.T) {
	srv, s := ownServer(t)
	ctx := context.Background()
	k := idem.Key{Scope: "x", ID: "1"}
	req := idem.ClaimRequest{Key: k, Now: storetest.T0, LeaseUntil: storetest.T0.Add(time.Second), ExpiresAt: storetest.T0.Add(time.Hour)}
	srv.Throttle(2, time.Millisecond)
	c, err := s.Claim(ctx, req)
	if err != nil || c.Outcome != idem.ClaimAcquired {
		t.Fatalf("Claim throttled twice: %v, %v; want the client's retries to get it through", c.Outcome, err)
	}
	srv.Throttle(1000, time.Millisecond)
	for what, err := range map[string]error{
		"Complete": s.Complete(ctx, idem.CompleteRequest{Key: k, Token: c.Record.Token, Now: storetest.T0, ExpiresAt: storetest.T0.Add(time.Hour)}),
		"Claim":    func() error { _, err := s.Claim(ctx, req); return err }(),
		"Get":      func() error { _, err := s.Get(ctx, k); return err }(),
		"Sweep":    func() error { _, err := s.Sweep(ctx, idem.SweepRequest{Now: storetest.T0, Limit: 10}); return err }(),
	} {
		var re *azcore.ResponseError
		if !errors.As(err, &re) || re.StatusCode != http.StatusTooManyRequests || idem.IsPermanent(err) || errors.Is(err, idem.ErrInvalidData) {
			t.Fatalf("%s throttled past the retries: %v; want the 429, retryable", what, err)
		}
	}
	srv.Throttle(0, 0)
	if r, err := s.Get(ctx, k); err != nil || r.State != idem.StateInProgress {
		t.Fatalf("Get once the throttling ends: %+v, %v", r, err)
	}
}

// The records of many keys are spread over every logical partition, and
// a record's id and partition key follow from its key alone.
func TestPartitionSpread(t *testing.T) {
	c := newClient(t)
	s := newStore(t, c, cosmos.Options{})
	ctx := context.Background()
	reqs := make([]idem.ClaimRequest, 200)
	for i := range reqs {
		reqs[i] = idem.ClaimRequest{Key: idem.Key{Scope: "spread", ID: fmt.Sprintf("order-%d", i)}, Now: storetest.T0,
			LeaseUntil: storetest.T0.Add(time.Minute), ExpiresAt: storetest.T0.Add(time.Hour)}
	}
	if _, err := s.ClaimBatch(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	q := s.Container().NewQueryItemsPager("SELECT c.pk, c.id FROM c WHERE IS_DEFINED(c.sid)", azcosmos.NewPartitionKey(), nil)
	for q.More() {
		page, err := q.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			var m struct{ PK, ID string }
			if err := json.Unmarshal(it, &m); err != nil {
				t.Fatal(err)
			}
			if len(m.ID) != 64 {
				t.Fatalf("item id %q; want the 64 hex digits of a SHA-256", m.ID)
			}
			per[m.PK]++
		}
	}
	if len(per) != cosmos.Partitions {
		t.Fatalf("200 records in %d logical partitions (%v); want all %d", len(per), per, cosmos.Partitions)
	}
}

// A client whose key the account refuses gets a store failure (retryable:
// the message is not at fault), never invalid data.
func TestWrongKey(t *testing.T) {
	srv := needServer(t)
	cred, err := azcosmos.NewKeyCredential("d3Jvbmcga2V5")
	if err != nil {
		t.Fatal(err)
	}
	c, err := azcosmos.NewClientWithKey(srv.URL(), cred, srv.ClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	s, err := cosmos.New(c, cosmos.Options{Database: testDatabase(), Container: uniqueContainer()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Claim(context.Background(), idem.ClaimRequest{Key: idem.Key{Scope: "x", ID: "1"}, Now: storetest.T0,
		LeaseUntil: storetest.T0.Add(time.Second), ExpiresAt: storetest.T0.Add(time.Hour)})
	if err == nil || idem.IsPermanent(err) {
		t.Fatalf("Claim with the wrong key: %v; want a retryable store failure", err)
	}
}
