package sqlrecord

import (
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

func TestMSRoundTrip(t *testing.T) {
	if NullMS(time.Time{}) != nil {
		t.Fatal("the zero time must be stored as NULL")
	}
	for _, at := range []time.Time{time.Unix(0, 0), time.UnixMilli(-1), time.Date(1969, 7, 20, 20, 17, 0, 0, time.UTC)} {
		if got := FromMS(MS(at)); !got.Equal(at) || got.IsZero() {
			t.Fatalf("round trip of %v = %v; the epoch and times before it are times, not unset", at, got)
		}
		if NullMS(at) != MS(at) {
			t.Fatalf("NullMS(%v) = %v", at, NullMS(at))
		}
	}
	at := time.Date(2026, 11, 30, 7, 0, 0, 123_000_000, time.FixedZone("x", 3600))
	if got := FromMS(MS(at)); !got.Equal(at) || got.Location() != time.UTC {
		t.Fatalf("round trip of %v = %v", at, got)
	}
}

func TestListConds(t *testing.T) {
	now := time.UnixMilli(5000)
	conds, args := ListConds(idem.ListFilter{Scope: "s", State: idem.StateInProgress, StaleAt: now, CreatedBefore: now,
		After: idem.Record{Scope: "s", ID: "x"}.Cursor(), Limit: 3})
	want := "scope = ? AND state = ? AND state = 'in_progress' AND lease_until <= ? AND created_at < ?"
	if got := strings.Join(conds, " AND "); got != want || len(args) != 4 || args[2] != int64(5000) {
		t.Fatalf("conds %q args %v", got, args)
	}
	if conds, args := ListConds(idem.ListFilter{}); conds != nil || args != nil {
		t.Fatalf("no filter: %v %v", conds, args)
	}
}
