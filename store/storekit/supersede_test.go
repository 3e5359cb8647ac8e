package storekit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

func TestPrepareSupersede(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	k := idem.Key{Scope: "s", ID: "1"}
	long := strings.Repeat("f", idem.MaxFingerprintLen+1)
	p, err := storekit.PrepareSupersede(idem.SupersedeRequest{Key: k, Token: 7, Fingerprint: long, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if p.Fingerprint != storekit.StoredFingerprint(long) {
		t.Fatalf("fingerprint %q, want it as stores keep it", p.Fingerprint)
	}
	for _, c := range []struct {
		name string
		req  idem.SupersedeRequest
		want error
	}{
		{"no id", idem.SupersedeRequest{Key: idem.Key{Scope: "s"}, Fingerprint: "f", Now: now}, idem.ErrNoKey},
		{"no scope", idem.SupersedeRequest{Key: idem.Key{ID: "1"}, Fingerprint: "f", Now: now}, idem.ErrInvalidKey},
		{"zero Now", idem.SupersedeRequest{Key: k, Fingerprint: "f"}, idem.ErrInvalidData},
		{"empty Fingerprint", idem.SupersedeRequest{Key: k, Now: now}, idem.ErrInvalidData},
	} {
		if _, err := storekit.PrepareSupersede(c.req); !errors.Is(err, c.want) || !idem.IsPermanent(err) {
			t.Errorf("%s: %v, want %v (permanent)", c.name, err, c.want)
		}
	}
}

// The supersede transition on each kind of current record (the
// idem.Superseder contract's table; storetest holds every store to it).
func TestApplySupersede(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	req := idem.SupersedeRequest{Key: idem.Key{Scope: "s", ID: "1"}, Token: 7, Fingerprint: "new", Now: now}
	rec := func(st idem.State, token int64, lease, expires time.Time) *idem.Record {
		return &idem.Record{Scope: "s", ID: "1", State: st, Token: token, Attempts: 3, Fingerprint: "old", Result: []byte("r"),
			LeaseUntil: lease, ExpiresAt: expires, CreatedAt: now.Add(-time.Hour), UpdatedAt: now.Add(-time.Minute)}
	}
	hour := now.Add(time.Hour)
	for _, c := range []struct {
		name string
		cur  *idem.Record
		want error
	}{
		{"absent", nil, idem.ErrNotFound},
		{"completed", rec(idem.StateCompleted, 7, now.Add(-time.Minute), hour), nil},
		{"released", rec(idem.StateReleased, 7, now.Add(-time.Minute), hour), nil},
		{"completed, never expires", rec(idem.StateCompleted, 7, now.Add(-time.Minute), time.Time{}), nil},
		{"completed and expired", rec(idem.StateCompleted, 7, now.Add(-time.Minute), now), idem.ErrNotFound},
		{"completed under another token", rec(idem.StateCompleted, 8, now.Add(-time.Minute), hour), idem.ErrLeaseLost},
		{"held", rec(idem.StateInProgress, 7, now.Add(time.Second), hour), idem.ErrLeaseLost},
		{"stale past its retention", rec(idem.StateInProgress, 7, now.Add(-time.Hour), now.Add(-time.Minute)), idem.ErrLeaseLost},
	} {
		var was idem.Record
		if c.cur != nil {
			was = *c.cur
		}
		err := storekit.ApplySupersede(c.cur, req)
		if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
			continue
		}
		if c.cur == nil {
			continue
		}
		r := *c.cur
		if err != nil {
			if r.State != was.State || r.Fingerprint != was.Fingerprint || string(r.Result) != "r" || !r.LeaseUntil.Equal(was.LeaseUntil) {
				t.Errorf("%s: refused, but the record changed: %+v", c.name, r)
			}
			continue
		}
		if r.State != idem.StateReleased || r.Fingerprint != "new" || r.Result != nil || !r.LeaseUntil.Equal(now) || !r.UpdatedAt.Equal(now) ||
			r.Token != was.Token || r.Attempts != was.Attempts || !r.CreatedAt.Equal(was.CreatedAt) || !r.ExpiresAt.Equal(was.ExpiresAt) {
			t.Errorf("%s: superseded record %+v", c.name, r)
		}
	}
}

// SupersedeByUpdate explains an update that changed nothing by the record
// read after it, and updates again when that record became one the update
// applies to.
func TestSupersedeByUpdate(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	req := idem.SupersedeRequest{Key: idem.Key{Scope: "s", ID: "1"}, Token: 7, Fingerprint: "new", Now: now}
	settled := idem.Record{State: idem.StateCompleted, Token: 7, Fingerprint: "old", ExpiresAt: now.Add(time.Hour)}
	superseded := settled
	superseded.State, superseded.Fingerprint = idem.StateReleased, "new"
	storeErr := errors.New("store down")
	for _, c := range []struct {
		name    string
		changed []bool        // the update's answers, in turn
		reads   []idem.Record // the records read after each unchanged update
		readErr error
		want    error
		giveUp  bool // an error that is neither ErrNotFound nor ErrLeaseLost
		updates int
	}{
		{"changed", []bool{true}, nil, nil, nil, false, 1},
		{"absent", []bool{false}, nil, idem.ErrNotFound, idem.ErrNotFound, false, 1},
		{"store down on the read", []bool{false}, nil, storeErr, storeErr, false, 1},
		{"expired", []bool{false}, []idem.Record{{State: idem.StateCompleted, Token: 7, ExpiresAt: now}}, nil, idem.ErrNotFound, false, 1},
		{"in progress", []bool{false}, []idem.Record{{State: idem.StateInProgress, Token: 7, ExpiresAt: now.Add(time.Hour)}}, nil, idem.ErrLeaseLost, false, 1},
		{"superseded already", []bool{false}, []idem.Record{superseded}, nil, nil, false, 1},
		{"completed since the update", []bool{false, true}, []idem.Record{settled}, nil, nil, false, 2},
		{"never changes", []bool{false, false, false}, []idem.Record{settled, settled, settled}, nil, nil, true, 3},
	} {
		updates, reads := 0, 0
		err := storekit.SupersedeByUpdate(context.Background(), req, func(context.Context) (bool, error) {
			updates++
			return c.changed[updates-1], nil
		}, func(_ context.Context, k idem.Key) (idem.Record, error) {
			if c.readErr != nil {
				return idem.Record{}, c.readErr
			}
			reads++
			return c.reads[reads-1], nil
		})
		switch {
		case c.giveUp:
			if err == nil || errors.Is(err, idem.ErrLeaseLost) || errors.Is(err, idem.ErrNotFound) {
				t.Errorf("%s: %v, want an error that says the update never applied", c.name, err)
			}
		case !errors.Is(err, c.want) || (c.want == nil) != (err == nil):
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if updates != c.updates {
			t.Errorf("%s: %d updates, want %d", c.name, updates, c.updates)
		}
	}
}
