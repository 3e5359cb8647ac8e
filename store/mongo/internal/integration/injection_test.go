package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/idemgo/idem"
	mongoidem "github.com/idemgo/idem/store/mongo"
)

// operatorIDs are ids a message could carry that a filter {_id: id} would
// read as query syntax: operators at the top and nested, in every shape the
// driver encodes as a document (bson.M, bson.D, a map decoded from JSON
// into any, a struct), a regular expression and an array.
func operatorIDs(t *testing.T) map[string]any {
	t.Helper()
	var fromJSON any
	if err := json.Unmarshal([]byte(`{"$gt": ""}`), &fromJSON); err != nil {
		t.Fatal(err)
	}
	var nestedJSON any
	if err := json.Unmarshal([]byte(`{"tenant": {"$ne": null}}`), &nestedJSON); err != nil {
		t.Fatal(err)
	}
	return map[string]any{
		"json {$gt: ''}":       fromJSON,
		"json nested $ne":      nestedJSON,
		"bson.M $gt":           bson.M{"$gt": ""},
		"bson.D $ne":           bson.D{{Key: "$ne", Value: nil}},
		"bson.D $exists":       bson.D{{Key: "$exists", Value: true}},
		"map $regex":           map[string]any{"$regex": "^"},
		"nested bson.D":        bson.D{{Key: "a", Value: bson.D{{Key: "$gt", Value: ""}}}},
		"in an array in a doc": bson.D{{Key: "a", Value: bson.A{bson.D{{Key: "$gt", Value: ""}}}}},
		"$where":               bson.M{"$where": "true"},
		"struct with a $ tag": struct {
			X string `bson:"$gt"`
		}{""},
		"regular expression":         bson.Regex{Pattern: ".*"},
		"array (matches by element)": bson.A{"victim"},
	}
}

// TestVersionedOperatorIDs: Versioned.Apply with an id that would be read as
// an operator is refused with a typed, permanent error, before anything is
// sent: the document at another _id keeps its owner and version, and
// nothing is inserted. (Before, {"$gt": ""} matched the victim and the
// attacker's owner and version were written over it.)
func TestVersionedOperatorIDs(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	v := &mongoidem.Versioned{Collection: entityColl(t, c)}
	if err := v.Apply(ctx, "victim", 1, bson.D{{Key: "owner", Value: "alice"}}); err != nil {
		t.Fatal(err)
	}
	for name, id := range operatorIDs(t) {
		err := v.Apply(ctx, id, 99, bson.D{{Key: "owner", Value: "mallory"}})
		var ide *idem.InvalidDataError
		if !errors.As(err, &ide) || !errors.Is(err, idem.ErrInvalidData) || !errors.Is(err, mongoidem.ErrOperatorValue) {
			t.Errorf("%s: Apply = %v; want an *idem.InvalidDataError wrapping ErrOperatorValue", name, err)
		}
		if a := idem.Decide(idem.Result{}, err); a != idem.ActionDeadLetter {
			t.Errorf("%s: action %v; want dead-letter (the same id fails every time)", name, a)
		}
	}
	// Operator-shaped field names in the update are refused the same way.
	for _, set := range []any{bson.D{{Key: "$inc", Value: bson.D{{Key: "version", Value: 1}}}}, bson.M{"$set": bson.M{"owner": "mallory"}}} {
		if err := v.Apply(ctx, "victim", 99, set); !errors.Is(err, mongoidem.ErrOperatorValue) || !errors.Is(err, idem.ErrInvalidData) {
			t.Errorf("set %v: Apply = %v; want ErrOperatorValue", set, err)
		}
	}
	var got struct {
		Owner   string `bson:"owner"`
		Version int64  `bson:"version"`
	}
	if err := v.Collection.FindOne(ctx, bson.D{{Key: "_id", Value: "victim"}}).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.Owner != "alice" || got.Version != 1 {
		t.Fatalf("victim = %+v; want owner alice at version 1", got)
	}
	if n := count(t, v.Collection); n != 1 {
		t.Fatalf("%d documents; want the victim alone", n)
	}
	// Plain ids of every other type still work: they are data.
	for _, id := range []any{"$gt", `{"$gt": ""}`, int64(7), bson.D{{Key: "tenant", Value: "t1"}, {Key: "n", Value: 1}}} {
		if err := v.Apply(ctx, id, 1, bson.D{{Key: "owner", Value: "bob"}}); err != nil {
			t.Errorf("id %v: %v", id, err)
		}
	}
	if n := count(t, v.Collection); n != 5 {
		t.Fatalf("%d documents; want the victim and 4 new ones", n)
	}
}

// TestEntityOperatorKeys: Entities.Insert takes its key as a string, which
// a filter matches by equality whatever it spells: operator-shaped keys
// create their own documents and never report the victim's content as a
// duplicate or conflict. A document whose fields begin with "$" is refused
// as invalid data.
func TestEntityOperatorKeys(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	orders := &mongoidem.Entities{Collection: entityColl(t, c), Scope: "orders"}
	if err := orders.Insert(ctx, "victim", "fp-victim", bson.D{{Key: "owner", Value: "alice"}}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`{"$gt": ""}`, "$gt", "$where", "$regex"} {
		if err := orders.Insert(ctx, key, "fp-mallory", bson.D{{Key: "owner", Value: "mallory"}}); err != nil {
			t.Errorf("key %q: %v; want its own document", key, err)
		}
		var de *idem.DuplicateError
		if err := orders.Insert(ctx, key, "fp-mallory", nil); !errors.As(err, &de) {
			t.Errorf("key %q again: %v; want a duplicate of its own document", key, err)
		}
	}
	for _, doc := range []any{bson.D{{Key: "$set", Value: bson.D{{Key: "owner", Value: "mallory"}}}}, bson.M{"$inc": 1}} {
		if err := orders.Insert(ctx, "k-doc", "fp", doc); !errors.Is(err, mongoidem.ErrOperatorValue) || !errors.Is(err, idem.ErrInvalidData) {
			t.Errorf("doc %v: %v; want ErrOperatorValue", doc, err)
		}
	}
	var got bson.M
	if err := orders.Collection.FindOne(ctx, bson.D{{Key: "_id", Value: "victim"}}).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got["owner"] != "alice" || got[mongoidem.DefaultFingerprintField] != "fp-victim" {
		t.Fatalf("victim = %v", got)
	}
	if n := count(t, orders.Collection); n != 5 {
		t.Fatalf("%d documents; want the victim and 4 new ones", n)
	}
}

// TestStoreOperatorKeys: the record store's entry points take scopes and
// ids as strings and build every filter from them by equality: keys that
// spell operators are records of their own, and no claim, completion,
// release, renewal, read, batch claim or listing through them touches the
// victim's record.
func TestStoreOperatorKeys(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	s := newStore(t, c, mongoidem.Options{})
	now := time.Now().Truncate(time.Millisecond)
	claim := func(k idem.Key) idem.ClaimRequest {
		return idem.ClaimRequest{Key: k, Fingerprint: "fp-" + k.ID, Now: now,
			LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour), TakeOverStale: true}
	}
	victim := idem.Key{Scope: "billing", ID: "victim"}
	vc, err := s.Claim(ctx, claim(victim))
	if err != nil || vc.Outcome != idem.ClaimAcquired {
		t.Fatalf("victim claim: %v %v", vc.Outcome, err)
	}
	ids := []string{`{"$gt": ""}`, "$gt", "$ne", "$where", `{"$regex": "^"}`, ".*", "\\", `{"_id": {"$exists": true}}`}
	var keys []idem.Key
	for _, id := range ids {
		keys = append(keys, idem.Key{Scope: "billing", ID: id}, idem.Key{Scope: id, ID: "victim"})
	}
	for _, k := range keys {
		if _, err := s.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
			t.Errorf("Get %s before any claim: %v; want ErrNotFound", k, err)
		}
		// The victim's token, through another key: no record of that key.
		if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: vc.Record.Token, Result: []byte("mallory"), Now: now, ExpiresAt: now.Add(time.Hour)}); !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("Complete %s: %v; want ErrLeaseLost", k, err)
		}
		if err := s.Release(ctx, idem.ReleaseRequest{Key: k, Token: vc.Record.Token, Now: now}); !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("Release %s: %v; want ErrLeaseLost", k, err)
		}
		if err := s.Renew(ctx, idem.RenewRequest{Key: k, Token: vc.Record.Token, Now: now, LeaseUntil: now.Add(time.Hour)}); !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("Renew %s: %v; want ErrLeaseLost", k, err)
		}
	}
	half := len(keys) / 2
	for _, k := range keys[:half] {
		if cl, err := s.Claim(ctx, claim(k)); err != nil || cl.Outcome != idem.ClaimAcquired || cl.Record.Key() != k {
			t.Errorf("Claim %s: %v %v %s; want its own new record", k, cl.Outcome, err, cl.Record.Key())
		}
	}
	var batch []idem.ClaimRequest
	for _, k := range keys[half:] {
		batch = append(batch, claim(k))
	}
	cls, err := s.ClaimBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	for i, cl := range cls {
		if cl.Outcome != idem.ClaimAcquired || cl.Record.Key() != batch[i].Key {
			t.Errorf("ClaimBatch %s: %v %s; want its own new record", batch[i].Key, cl.Outcome, cl.Record.Key())
		}
	}
	for _, scope := range ids {
		recs, err := s.List(ctx, idem.ListFilter{Scope: scope, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 || recs[0].Scope != scope {
			t.Errorf("List scope %q: %d records; want its own one", scope, len(recs))
		}
	}
	r, err := s.Get(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != idem.StateInProgress || r.Token != vc.Record.Token || r.Fingerprint != "fp-victim" || !r.LeaseUntil.Equal(now.Add(time.Minute)) {
		t.Fatalf("victim = %+v; want its own claim untouched", r)
	}
}
