package idem

import (
	"context"
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
	// intervals of q.Step from q.From. Stores call storekit.PrepareActivity first (and
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
