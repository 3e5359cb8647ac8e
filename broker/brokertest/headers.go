package brokertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/store/memory"
)

// present marks a header wantHeaders asks for with any non-empty value.
const present = "\x00present"

// checkDeadLetterHeaders fails t unless d carries exactly the idem
// dead-letter headers of want (every name of broker.DeadLetterHeaderNames
// is looked up; a name missing from want must be absent), each with the
// value want gives, or any value for present. Names match
// case-insensitively. Every dead letter of every broker is checked with
// it, so that all are held to one header set.
func checkDeadLetterHeaders(t *testing.T, d DeadLetter, want map[string]string) {
	t.Helper()
	for _, name := range broker.DeadLetterHeaderNames {
		got, ok := headerOf(d, name)
		w, wanted := want[name]
		switch {
		case !wanted && ok:
			t.Errorf("%s dead letter (%s): %s = %q, which it should not carry (%v)", d.Reason(), d.ID, name, got, d.Headers)
		case wanted && got == "":
			t.Errorf("%s dead letter (%s): no %s (%v)", d.Reason(), d.ID, name, d.Headers)
		case wanted && w != present && got != w:
			t.Errorf("%s dead letter (%s): %s = %q, want %q", d.Reason(), d.ID, name, got, w)
		}
	}
}

// headerOf is d's header name, matched case-insensitively, and whether it
// is there.
func headerOf(d DeadLetter, name string) (string, bool) {
	for k, v := range d.Headers {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}

// deadLetterHeaders is what checkDeadLetterHeaders wants of the dead
// letter of m under g: the reason and the error always; the key where m
// has one; m's fingerprint; and the stored record's headers as the store
// holds the record once the delivery is settled: state "" for none at
// all (no key to read), idem.StoredStateNone alone for a key without a
// record, else that state with the other stored headers (the
// fingerprint, when not empty, exactly).
func deadLetterHeaders(g *idem.Guard, m Message, reason string, storedFP string, state string) map[string]string {
	im := idem.Message{ID: m.ID, Payload: m.Payload, Headers: m.Headers}
	h := map[string]string{idem.HeaderReason: reason, idem.HeaderError: present}
	if fp, err := g.Fingerprint(im); err == nil && fp != "" {
		h[idem.HeaderFingerprint] = fp
	} else {
		h[idem.HeaderFingerprint] = present
	}
	if k, err := g.Key(im); err == nil {
		h[idem.HeaderDeadLetterKey] = k.String()
	}
	switch state {
	case "":
	case idem.StoredStateNone:
		h[idem.HeaderStoredState] = state
	default:
		for _, name := range []string{idem.HeaderStoredFingerprint, idem.HeaderStoredToken,
			idem.HeaderStoredCreatedAt, idem.HeaderStoredAttempts} {
			h[name] = present
		}
		h[idem.HeaderStoredState] = state
		if storedFP != "" {
			h[idem.HeaderStoredFingerprint] = storedFP
		}
	}
	return h
}

// testDeadLetterHeadersEveryReason: a dead letter of every reason —
// conflict, permanent, no_key, invalid_data, parked and (with a delivery
// limit) max_deliver — carries the same idem header set: the reason, the
// error, the key where the message had one, the message's fingerprint,
// and the stored record's headers as the store holds the record once the
// delivery is settled (released after a failed two-phase handler, none
// where the claim was never written).
func testDeadLetterHeadersEveryReason(t *testing.T, b Broker) {
	store := &refusing{Store: memory.New(), invalidID: "invalid-data-1"}
	// Park stale records, so that an orphaned claim is dead-lettered as
	// parked for an operator rather than retaken.
	g := newGuard(t, store, idem.Options{Stale: idem.StalePark})
	limit := 0
	if b.Features().DeliveryLimit {
		limit = 2
	}
	eff, out := newEffects(), newOutcomes()
	c := Consumer{
		Guard:         g,
		MaxDeliveries: limit,
		RetryBackoff:  10 * time.Millisecond,
		Handle: func(ctx context.Context, m idem.Message) ([]byte, error) {
			switch m.ID {
			case "permanent-1":
				return nil, idem.Permanent(errors.New("card rejected"))
			case "max-deliver-1":
				return nil, errors.New("downstream down")
			}
			eff.apply(m)
			return nil, nil
		},
		Hooks: broker.Hooks[idem.Message]{AfterSettle: out.hook},
	}
	var (
		orig     = Message{ID: "conflict-1", Payload: []byte(`{"amount":1}`)}
		reuse    = Message{ID: "conflict-1", Payload: []byte(`{"amount":2}`)}
		perm     = Message{ID: "permanent-1", Payload: []byte("p")}
		noKey    = Message{Payload: []byte("no key here")}
		badData  = Message{ID: "invalid-data-1", Payload: []byte("d")}
		parked   = Message{ID: "parked-1", Payload: []byte("s")}
		failing  = Message{ID: "max-deliver-1", Payload: []byte("f")}
		fp       = func(m Message) string { f, _ := g.Fingerprint(idem.Message{ID: m.ID, Payload: m.Payload}); return f }
		expected = map[string]map[string]string{
			// Each as the store holds the key once the delivery is
			// settled: a failed handler's claim released, a refused
			// claim never written.
			"conflict":     deadLetterHeaders(g, reuse, "conflict", fp(orig), string(idem.StateCompleted)),
			"permanent":    deadLetterHeaders(g, perm, "permanent", fp(perm), string(idem.StateReleased)),
			"no_key":       deadLetterHeaders(g, noKey, "no_key", "", ""),
			"invalid_data": deadLetterHeaders(g, badData, "invalid_data", "", idem.StoredStateNone),
			"parked":       deadLetterHeaders(g, parked, "parked", fp(parked), string(idem.StateInProgress)),
		}
	)
	// parked-1's claim was orphaned an hour ago: stale, never retaken.
	k, _ := g.Key(idem.Message{ID: parked.ID})
	now := time.Now()
	if _, err := store.Claim(context.Background(), idem.ClaimRequest{Key: k, Fingerprint: fp(parked),
		Now: now.Add(-2 * time.Hour), LeaseUntil: now.Add(-time.Hour), ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	msgs := []Message{orig, perm, noKey, badData, parked}
	if limit > 0 {
		msgs = append(msgs, failing)
		expected[broker.ReasonMaxDeliver] = deadLetterHeaders(g, failing, broker.ReasonMaxDeliver, fp(failing), string(idem.StateReleased))
	} else {
		t.Logf("no delivery limit: %s not checked", broker.ReasonMaxDeliver)
	}
	start(t, b, c)
	publish(t, b, msgs...)
	waitFor(t, "the original applied", func() bool { return eff.count(orig.ID) == 1 }, out.String)
	publish(t, b, reuse)
	dls := waitDeadLetters(t, b, len(expected))
	seen := map[string]bool{}
	for _, d := range dls {
		want, ok := expected[d.Reason()]
		if !ok {
			t.Errorf("dead letter %q with reason %q, not one of the case's (%v)", d.ID, d.Reason(), d.Headers)
			continue
		}
		seen[d.Reason()] = true
		checkDeadLetterHeaders(t, d, want)
	}
	if len(seen) != len(expected) || len(dls) != len(expected) {
		t.Fatalf("dead letters by reason %v (%d in all), want one of each of %d: %s", seen, len(dls), len(expected), fmt.Sprint(keys(expected)))
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// testDeadLetterHeadersTx: in the transactional inbox, a permanent failure
// rolls the marker back with the business writes, so its dead letter says
// the key has no record (Idem-Stored-State: none, no token, no attempts),
// never the completed marker the rolled-back transaction wrote; a conflict
// says what the store holds (the original, completed, with its
// fingerprint), and nothing of the conflicting message is committed.
func testDeadLetterHeadersTx(t *testing.T, b Broker) {
	in := newInbox(t)
	g := newGuard(t, in.store, idem.Options{})
	out := newOutcomes()
	c := Consumer{
		Guard: g,
		HandleTx: func(ctx context.Context, tx *sql.Tx, m idem.Message) ([]byte, error) {
			if _, err := in.apply(ctx, tx, m); err != nil {
				return nil, err
			}
			if m.ID == "permanent-tx-1" {
				return nil, idem.Permanent(errors.New("card rejected"))
			}
			return nil, nil
		},
		Hooks: broker.Hooks[idem.Message]{AfterSettle: out.hook},
	}
	var (
		perm  = Message{ID: "permanent-tx-1", Payload: []byte("p")}
		orig  = Message{ID: "conflict-tx-1", Payload: []byte(`{"amount":1}`)}
		reuse = Message{ID: "conflict-tx-1", Payload: []byte(`{"amount":2}`)}
		fp    = func(m Message) string { f, _ := g.Fingerprint(idem.Message{ID: m.ID, Payload: m.Payload}); return f }
	)
	expected := map[string]map[string]string{
		"permanent": deadLetterHeaders(g, perm, "permanent", "", idem.StoredStateNone),
		"conflict":  deadLetterHeaders(g, reuse, "conflict", fp(orig), string(idem.StateCompleted)),
	}
	start(t, b, c)
	publish(t, b, perm, orig)
	waitFor(t, "the original committed", func() bool {
		return in.count(t, `SELECT COUNT(*) FROM effects WHERE id = ?`, orig.ID) == 1
	}, out.String)
	publish(t, b, reuse)
	dls := waitDeadLetters(t, b, len(expected))
	for _, d := range dls {
		want, ok := expected[d.Reason()]
		if !ok {
			t.Errorf("dead letter %q with reason %q, not one of the case's (%v)", d.ID, d.Reason(), d.Headers)
			continue
		}
		checkDeadLetterHeaders(t, d, want)
	}
	if len(dls) != len(expected) {
		t.Fatalf("%d dead letters, want %d", len(dls), len(expected))
	}
	if n := in.count(t, `SELECT COUNT(*) FROM effects WHERE id = ?`, perm.ID); n != 0 {
		t.Errorf("%d effect rows of the permanently failed message, want 0 (rolled back)", n)
	}
	if n := in.count(t, `SELECT COUNT(*) FROM effects WHERE id = ?`, orig.ID); n != 1 {
		t.Errorf("%d effect rows of the conflicting key, want the original's 1", n)
	}
	k, _ := g.Key(idem.Message{ID: perm.ID})
	if r, err := g.Store().Get(context.Background(), k); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("the store holds %+v (%v) for the rolled-back key, want no record", r, err)
	}
}
