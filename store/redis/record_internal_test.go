package redisidem

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

func TestRecordRoundTrip(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	recs := []idem.Record{
		{Scope: "s", ID: "i", DisplayID: "i", State: idem.StateInProgress, Token: 1, Attempts: 1,
			LeaseUntil: t0, ExpiresAt: t0.Add(time.Hour), CreatedAt: t0, UpdatedAt: t0},
		{Scope: "a|b", ID: "sha256:00", DisplayID: strings.Repeat("long|", 300), State: idem.StateCompleted,
			Fingerprint: "f|p", Result: []byte{0, '|', 0xff, '\n', '1', '|'}, Token: 1 << 52, Attempts: 7,
			CreatedAt: time.UnixMilli(-5).UTC()},
		{Scope: "s", ID: "empty", DisplayID: "empty", State: idem.StateReleased},
	}
	for _, r := range recs {
		got, err := decodeRecord(encodeRecord(r))
		if err != nil {
			t.Fatalf("decode(encode(%+v)): %v", r, err)
		}
		if got.Scope != r.Scope || got.ID != r.ID || got.DisplayID != r.DisplayID || got.State != r.State ||
			got.Fingerprint != r.Fingerprint || !bytes.Equal(got.Result, r.Result) || got.Token != r.Token ||
			got.Attempts != r.Attempts || !got.LeaseUntil.Equal(r.LeaseUntil) || !got.ExpiresAt.Equal(r.ExpiresAt) ||
			!got.CreatedAt.Equal(r.CreatedAt) || !got.UpdatedAt.Equal(r.UpdatedAt) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, r)
		}
	}
	for _, bad := range []string{"", "2|completed|1|1|||||0|0|0|0|", "1|completed|x|1|||||0|0|0|0|", "1|completed|1|1|||||9|0|0|0|short"} {
		if _, err := decodeRecord(bad); !errors.Is(err, errMalformed) {
			t.Errorf("decodeRecord(%q) = %v, want errMalformed", bad, err)
		}
	}
}

// TestLuaWritesWhatGoWrites: the scripts' slow path (a store that did not
// make the claim completes it) and the compare-and-set fast path (the
// claiming store completes it) leave byte-identical values, equal to Go's
// encoding of the expected record. This keeps record.go and luaRecord in
// step.
func TestLuaWritesWhatGoWrites(t *testing.T) {
	a := internalStore(t)
	b, err := New(a.client, Options{Prefix: a.prefix}) // same records, no held claims
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond).UTC()
	result := []byte("res|ult\x00\xff")
	finalValue := func(via *Store, id string) (string, idem.Record) {
		k := idem.Key{Scope: "sc|ope", ID: id}
		c, err := a.Claim(ctx, idem.ClaimRequest{Key: k, Fingerprint: "fp|1", Now: now,
			LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
		if err != nil || c.Outcome != idem.ClaimAcquired {
			t.Fatalf("claim: %v %v", c.Outcome, err)
		}
		later := now.Add(time.Second)
		if err := via.Renew(ctx, idem.RenewRequest{Key: k, Token: c.Record.Token, Now: later, LeaseUntil: later.Add(time.Minute)}); err != nil {
			t.Fatalf("renew: %v", err)
		}
		if err := via.Complete(ctx, idem.CompleteRequest{Key: k, Token: c.Record.Token, Result: result, Now: later, ExpiresAt: later.Add(2 * time.Hour)}); err != nil {
			t.Fatalf("complete: %v", err)
		}
		v, err := a.client.Get(ctx, keyOf(a.prefix, k)).Result()
		if err != nil {
			t.Fatal(err)
		}
		want := c.Record
		want.State, want.Result, want.LeaseUntil, want.ExpiresAt, want.UpdatedAt =
			idem.StateCompleted, result, later.Add(time.Minute), later.Add(2*time.Hour), later
		return v, want
	}
	long := strings.Repeat("x", idem.MaxIDLen+1) // hashed id with a display id
	for _, id := range []string{"id-1", long} {
		slow, want := finalValue(b, id)
		if enc := encodeRecord(want); slow != enc {
			t.Fatalf("Lua wrote\n%q\nGo encodes\n%q", slow, enc)
		}
	}
	if _, err := a.client.Del(ctx, keyOf(a.prefix, idem.Key{Scope: "sc|ope", ID: "id-1"}), keyOf(a.prefix, idem.Key{Scope: "sc|ope", ID: long})).Result(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"id-1", long} {
		fast, want := finalValue(a, id)
		if enc := encodeRecord(want); fast != enc {
			t.Fatalf("fast path wrote\n%q\nwant\n%q", fast, enc)
		}
	}
}
