package integration_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/idemgo/idem"
	mongoidem "github.com/idemgo/idem/store/mongo"
	"github.com/idemgo/idem/store/storetest"
)

// TestRetainMovesTTLAt: a retained record's ttl_at, the time the TTL index
// deletes it by the server's clock, moves with its retention (measured from
// the request's now, here years from the server's clock), so the index
// never removes a step its run still keeps.
func TestRetainMovesTTLAt(t *testing.T) {
	c := newClient(t)
	s := newStore(t, c, mongoidem.Options{})
	ctx := context.Background()
	now := storetest.T0
	k := idem.Key{Scope: "s", ID: "step-a"}
	req := claimReq(k, now)
	req.ExpiresAt = now.Add(time.Hour)
	cl, err := s.Claim(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: cl.Record.Token, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	later := now.Add(30 * time.Minute)
	before := time.Now()
	if err := s.Retain(ctx, idem.RetainRequest{Key: k, Token: cl.Record.Token, Now: later, ExpiresAt: later.Add(5 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	var d struct {
		TTLAt *time.Time `bson:"ttl_at"`
	}
	if err := s.Collection().FindOne(ctx, bson.D{{Key: "_id", Value: "s\x00" + k.ID}}).Decode(&d); err != nil {
		t.Fatal(err)
	}
	// This machine is the server's: its clock is the server's.
	lo, hi := before.Add(5*time.Hour), time.Now().Add(5*time.Hour+2*time.Minute)
	if d.TTLAt == nil || d.TTLAt.Before(lo) || d.TTLAt.After(hi) {
		t.Errorf("ttl_at after Retain = %v, want within [%v, %v] (the server's clock plus the new retention)", d.TTLAt, lo, hi)
	}
}
