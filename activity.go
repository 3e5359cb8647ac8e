package idem

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// ActivityCounter is implemented by stores that count their records over
// time: per scope, how many were claimed, completed and released in each
// interval of a window. It is what every process of a fleet shares, so a
// console run apart from the consumers (idem console) charts the whole
// fleet's work from it.
//
// A record is counted by its times as stored: once by CreatedAt (its
// lifetime's first claim) and once by UpdatedAt under its current state
// (the completion of a completed record, the release of a released one,
// the last claim or renewal of one in progress). A change overwrites the
// one before it, so a record released and claimed again counts as in
// progress, not as released: the counts are what the records say now,
// not a log of every step (the guards' metrics are that log).
//
// Every store in this module implements it, and storetest checks it.
// Like Stats it reads the records of the window (the SQL stores: one
// grouped scan), which an operator's page does now and then, not a
// request path.
type ActivityCounter interface {
	// Activity counts the records of q's window by scope, in q.Buckets
	// intervals of q.Step from q.From. Stores call q.Prepare first (and
	// return its error). Scopes with no record in the window are left out;
	// scopes come in name order, each with q.Buckets buckets, oldest first.
	Activity(ctx context.Context, q ActivityQuery) ([]ScopeActivity, error)
}

// MaxActivityBuckets bounds ActivityQuery.Buckets.
const MaxActivityBuckets = 10000

// ActivityQuery selects the window an ActivityCounter counts.
type ActivityQuery struct {
	Scope   string        // "" for every scope
	From    time.Time     // the first bucket's start (kept to the millisecond)
	Step    time.Duration // each bucket's width: whole milliseconds, at least one second
	Buckets int           // how many buckets: 1 to MaxActivityBuckets
}

// To is the end of the window (exclusive).
func (q ActivityQuery) To() time.Time { return q.From.Add(q.Step * time.Duration(q.Buckets)) }

// Prepare checks a query before a store runs it: a zero From, a Step under
// a second or not whole milliseconds, or Buckets out of range is an
// ErrInvalidOptions. From is truncated to the millisecond, as stores keep
// times.
func (q ActivityQuery) Prepare() (ActivityQuery, error) {
	switch {
	case q.From.IsZero():
		return q, fmt.Errorf("%w: ActivityQuery with a zero From", ErrInvalidOptions)
	case q.Step < time.Second || q.Step%time.Millisecond != 0:
		return q, fmt.Errorf("%w: ActivityQuery.Step %v: whole milliseconds, at least 1s", ErrInvalidOptions, q.Step)
	case q.Buckets < 1 || q.Buckets > MaxActivityBuckets:
		return q, fmt.Errorf("%w: ActivityQuery.Buckets %d: 1 to %d", ErrInvalidOptions, q.Buckets, MaxActivityBuckets)
	}
	q.From = q.From.Truncate(time.Millisecond)
	return q, nil
}

// Bucket is the index of the bucket t falls in, or -1 when t is outside the
// window (or zero).
func (q ActivityQuery) Bucket(t time.Time) int {
	if t.IsZero() || t.Before(q.From) {
		return -1
	}
	i := int(t.Sub(q.From) / q.Step)
	if i >= q.Buckets {
		return -1
	}
	return i
}

// ScopeActivity is one scope's counts over an ActivityQuery's window.
type ScopeActivity struct {
	Scope   string
	Buckets []ActivityBucket // oldest first
}

// ActivityBucket counts the records of one scope in one interval.
type ActivityBucket struct {
	Start      time.Time
	Claimed    int64 // records whose CreatedAt is in the interval
	Completed  int64 // completed records whose UpdatedAt (the completion) is in it
	Released   int64 // released records whose UpdatedAt (the release) is in it
	InProgress int64 // in-progress records whose UpdatedAt (claim or renewal) is in it
	Retried    int64 // of the UpdatedAt counts, records claimed more than once (Attempts > 1)
}

// ActivityByCreation is the state ActivityTally.Add takes for counts by
// CreatedAt (ActivityBucket.Claimed); it is no record's state.
const ActivityByCreation State = "created"

// ActivityTally adds records up into an Activity answer: stores that read
// records count them with Record; stores that group in a query add their
// groups' counts with Add.
type ActivityTally struct {
	q      ActivityQuery
	scopes map[string]*ScopeActivity
}

// NewActivityTally returns an empty tally for the prepared query q.
func NewActivityTally(q ActivityQuery) *ActivityTally {
	return &ActivityTally{q: q, scopes: map[string]*ScopeActivity{}}
}

// Record counts r (when its scope is q's, or q has none) by its CreatedAt
// and by its UpdatedAt under its state.
func (t *ActivityTally) Record(r Record) {
	if t.q.Scope != "" && r.Scope != t.q.Scope {
		return
	}
	t.Add(r.Scope, ActivityByCreation, t.q.Bucket(r.CreatedAt), false, 1)
	t.Add(r.Scope, r.State, t.q.Bucket(r.UpdatedAt), r.Attempts > 1, 1)
}

// Add counts n records of scope in bucket i: with ActivityByCreation by their
// CreatedAt; with a State by their UpdatedAt, retried when claimed more
// than once. A bucket outside the window (i < 0) is ignored.
func (t *ActivityTally) Add(scope string, state State, i int, retried bool, n int64) {
	if i < 0 || i >= t.q.Buckets || n == 0 {
		return
	}
	s := t.scopes[scope]
	if s == nil {
		s = &ScopeActivity{Scope: scope, Buckets: make([]ActivityBucket, t.q.Buckets)}
		for j := range s.Buckets {
			s.Buckets[j].Start = t.q.From.Add(t.q.Step * time.Duration(j))
		}
		t.scopes[scope] = s
	}
	b := &s.Buckets[i]
	switch state {
	case ActivityByCreation:
		b.Claimed += n
		return
	case StateCompleted:
		b.Completed += n
	case StateReleased:
		b.Released += n
	case StateInProgress:
		b.InProgress += n
	default:
		return
	}
	if retried {
		b.Retried += n
	}
}

// Result returns the scopes counted, in name order.
func (t *ActivityTally) Result() []ScopeActivity {
	out := make([]ScopeActivity, 0, len(t.scopes))
	for _, s := range t.scopes {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Scope < out[j].Scope })
	return out
}
