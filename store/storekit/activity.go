package storekit

import (
	"fmt"
	"sort"
	"time"

	"github.com/idemgo/idem"
)

// PrepareActivity checks an activity query before a store runs it: a zero
// From, a Step under a second or not whole milliseconds, or Buckets out of
// range is an idem.ErrInvalidOptions. From is truncated to the millisecond,
// as stores keep times.
func PrepareActivity(q idem.ActivityQuery) (idem.ActivityQuery, error) {
	switch {
	case q.From.IsZero():
		return q, fmt.Errorf("%w: ActivityQuery with a zero From", idem.ErrInvalidOptions)
	case q.Step < time.Second || q.Step%time.Millisecond != 0:
		return q, fmt.Errorf("%w: ActivityQuery.Step %v: whole milliseconds, at least 1s", idem.ErrInvalidOptions, q.Step)
	case q.Buckets < 1 || q.Buckets > idem.MaxActivityBuckets:
		return q, fmt.Errorf("%w: ActivityQuery.Buckets %d: 1 to %d", idem.ErrInvalidOptions, q.Buckets, idem.MaxActivityBuckets)
	}
	q.From = q.From.Truncate(time.Millisecond)
	return q, nil
}

// ByCreation is the state ActivityTally.Add takes for counts by CreatedAt
// (idem.ActivityBucket.Claimed); it is no record's state.
const ByCreation idem.State = "created"

// ActivityTally adds records up into an idem.ActivityCounter answer: stores
// that read records count them with Record; stores that group in a query add
// their groups' counts with Add.
type ActivityTally struct {
	q      idem.ActivityQuery
	scopes map[string]*idem.ScopeActivity
}

// NewActivityTally returns an empty tally for q, prepared with
// PrepareActivity.
func NewActivityTally(q idem.ActivityQuery) *ActivityTally {
	return &ActivityTally{q: q, scopes: map[string]*idem.ScopeActivity{}}
}

// Record counts r (when its scope is q's, or q has none) by its CreatedAt
// and by its UpdatedAt under its state.
func (t *ActivityTally) Record(r idem.Record) {
	if t.q.Scope != "" && r.Scope != t.q.Scope {
		return
	}
	t.Add(r.Scope, ByCreation, t.q.Bucket(r.CreatedAt), false, 1)
	t.Add(r.Scope, r.State, t.q.Bucket(r.UpdatedAt), r.Attempts > 1, 1)
}

// Add counts n records of scope in bucket i: with ByCreation by their
// CreatedAt; with a State by their UpdatedAt, retried when claimed more
// than once. A bucket outside the window (i < 0) is ignored.
func (t *ActivityTally) Add(scope string, state idem.State, i int, retried bool, n int64) {
	if i < 0 || i >= t.q.Buckets || n == 0 {
		return
	}
	s := t.scopes[scope]
	if s == nil {
		s = &idem.ScopeActivity{Scope: scope, Buckets: make([]idem.ActivityBucket, t.q.Buckets)}
		for j := range s.Buckets {
			s.Buckets[j].Start = t.q.From.Add(t.q.Step * time.Duration(j))
		}
		t.scopes[scope] = s
	}
	b := &s.Buckets[i]
	switch state {
	case ByCreation:
		b.Claimed += n
		return
	case idem.StateCompleted:
		b.Completed += n
	case idem.StateReleased:
		b.Released += n
	case idem.StateInProgress:
		b.InProgress += n
	default:
		return
	}
	if retried {
		b.Retried += n
	}
}

// Result returns the scopes counted, in name order.
func (t *ActivityTally) Result() []idem.ScopeActivity {
	out := make([]idem.ScopeActivity, 0, len(t.scopes))
	for _, s := range t.scopes {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Scope < out[j].Scope })
	return out
}
