package storekit

import (
	"time"

	"github.com/idemgo/idem"
)

// Match reports whether r passes f's filters (Scope, State, StaleAt,
// CreatedBefore and After; not Limit). Stores that filter in Go rather than
// in a query use it for idem.Inspector's List.
func Match(f idem.ListFilter, r idem.Record) bool {
	switch {
	case f.Scope != "" && r.Scope != f.Scope:
		return false
	case f.State != "" && r.State != f.State:
		return false
	case !f.StaleAt.IsZero() && !r.LeaseExpired(f.StaleAt):
		return false
	case !f.CreatedBefore.IsZero() && !r.CreatedAt.Before(f.CreatedBefore):
		return false
	case !f.After.Before(r):
		return false
	}
	return true
}

// AddStats counts r, a record of st's scope, into st as of now. Stores that
// count in Go rather than in a query use it for idem.Inspector's Stats.
func AddStats(st *idem.ScopeStats, r idem.Record, now time.Time) {
	switch r.State {
	case idem.StateInProgress:
		st.InProgress++
		if r.LeaseExpired(now) {
			st.Stale++
		}
		if st.OldestInProgress.IsZero() || r.CreatedAt.Before(st.OldestInProgress) {
			st.OldestInProgress = r.CreatedAt
		}
	case idem.StateCompleted:
		st.Completed++
	case idem.StateReleased:
		st.Released++
	}
	if r.Expired(now) {
		st.Expired++
	}
}
