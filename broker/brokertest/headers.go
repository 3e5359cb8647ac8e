package brokertest

import (
	"context"
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
// has one; m's fingerprint; and, where the call read a record, the stored
// record's headers (its fingerprint, when not empty, exactly).
func deadLetterHeaders(g *idem.Guard, m Message, reason string, storedFP string, readRecord bool) map[string]string {
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
	if readRecord {
		for _, name := range []string{idem.HeaderStoredFingerprint, idem.HeaderStoredState, idem.HeaderStoredToken,
			idem.HeaderStoredCreatedAt, idem.HeaderStoredAttempts} {
			h[name] = present
		}
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
// and the stored record's headers where the call read a record.
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
			"conflict":     deadLetterHeaders(g, reuse, "conflict", fp(orig), true),
			"permanent":    deadLetterHeaders(g, perm, "permanent", fp(perm), true),
			"no_key":       deadLetterHeaders(g, noKey, "no_key", "", false),
			"invalid_data": deadLetterHeaders(g, badData, "invalid_data", "", false),
			"parked":       deadLetterHeaders(g, parked, "parked", fp(parked), true),
		}
	)
	expected["conflict"][idem.HeaderStoredState] = string(idem.StateCompleted)
	expected["parked"][idem.HeaderStoredState] = string(idem.StateInProgress)
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
		expected[broker.ReasonMaxDeliver] = deadLetterHeaders(g, failing, broker.ReasonMaxDeliver, fp(failing), true)
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
