package cosmos

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

// query runs q in the logical partition pk, or across partitions when pk
// is "", and calls fn with each item until fn says stop or the items run
// out. page is the page size asked for (0: the service's).
func (s *Store) query(ctx context.Context, q, pk string, params []azcosmos.QueryParameter, page int32, fn func([]byte) (bool, error)) error {
	key := azcosmos.NewPartitionKey()
	if pk != "" {
		key = azcosmos.NewPartitionKeyString(pk)
	}
	pager := s.coll.NewQueryItemsPager(q, key, &azcosmos.QueryOptions{QueryParameters: params, PageSizeHint: page})
	for pager.More() {
		resp, err := pager.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, it := range resp.Items {
			more, err := fn(it)
			if err != nil || !more {
				return err
			}
		}
	}
	return nil
}

// isRecord keeps records and leaves out the store's other items (the
// sweep lock) in cross-partition queries.
const isRecord = "IS_DEFINED(c.sid)"

// msAfter is the first whole millisecond not before t: a stored time (whole
// milliseconds) is before t exactly when it is before msAfter(t).
func msAfter(t time.Time) num {
	n := ms(t)
	if fromMS(n).Before(t) {
		n++
	}
	return n
}

// List implements idem.Inspector. Records are spread over Partitions
// logical partitions, and a query across partitions may not be ordered
// (the gateway refuses it), so List asks each partition for its first
// Limit records after the cursor in order (one query each, the filters
// and the order served by the container's index) and merges them.
func (s *Store) List(ctx context.Context, f idem.ListFilter) ([]idem.Record, error) {
	limit := f.PageLimit()
	after := ""
	if !f.After.IsZero() {
		after = order(f.After.Scope(), f.After.StoredID())
	}
	where := []string{"c.ord > @after"}
	params := []azcosmos.QueryParameter{{Name: "@after", Value: after}}
	if f.Scope != "" {
		where = append(where, "c.scope = @scope")
		params = append(params, azcosmos.QueryParameter{Name: "@scope", Value: f.Scope})
	}
	if f.State != "" {
		where = append(where, "c.state = @state")
		params = append(params, azcosmos.QueryParameter{Name: "@state", Value: string(f.State)})
	}
	if !f.StaleAt.IsZero() {
		where = append(where, "c.state = @inProgress AND c.lease <= @staleAt")
		params = append(params, azcosmos.QueryParameter{Name: "@inProgress", Value: string(idem.StateInProgress)},
			azcosmos.QueryParameter{Name: "@staleAt", Value: ms(f.StaleAt)})
	}
	if !f.CreatedBefore.IsZero() {
		where = append(where, "c.created < @createdBefore")
		params = append(params, azcosmos.QueryParameter{Name: "@createdBefore", Value: msAfter(f.CreatedBefore)})
	}
	q := "SELECT * FROM c WHERE " + strings.Join(where, " AND ") + " ORDER BY c.ord"

	docs := make([][]recordDoc, Partitions)
	errs := make([]error, Partitions)
	done := make(chan struct{})
	sem := make(chan struct{}, 4)
	for i := range Partitions {
		go func() {
			sem <- struct{}{}
			defer func() { <-sem; done <- struct{}{} }()
			errs[i] = s.query(ctx, q, bucket(i), params, int32(limit), func(b []byte) (bool, error) {
				d, err := decodeDoc(b)
				if err != nil {
					return false, err
				}
				docs[i] = append(docs[i], d)
				return len(docs[i]) < limit, nil
			})
		}()
	}
	for range Partitions {
		<-done
	}
	var all []recordDoc
	for i := range Partitions {
		if errs[i] != nil {
			return nil, wrap("list", errs[i])
		}
		all = append(all, docs[i]...)
	}
	slices.SortFunc(all, func(a, b recordDoc) int { return strings.Compare(a.Ord, b.Ord) })
	out := make([]idem.Record, 0, min(limit, len(all)))
	for _, d := range all[:min(limit, len(all))] {
		out = append(out, d.record())
	}
	return out, nil
}

// Stats implements idem.Inspector: one query across partitions, reading
// each record's scope, state and times, counted in Go.
func (s *Store) Stats(ctx context.Context, now time.Time) ([]idem.ScopeStats, error) {
	by := map[string]*idem.ScopeStats{}
	q := "SELECT c.scope, c.state, c.lease, c.exp, c.created FROM c WHERE " + isRecord
	err := s.query(ctx, q, "", nil, -1, func(b []byte) (bool, error) {
		d, err := decodeDoc(b)
		if err != nil {
			return false, err
		}
		st := by[d.Scope]
		if st == nil {
			st = &idem.ScopeStats{Scope: d.Scope}
			by[d.Scope] = st
		}
		storekit.AddStats(st, d.record(), now)
		return true, nil
	})
	if err != nil {
		return nil, wrap("stats", err)
	}
	out := make([]idem.ScopeStats, 0, len(by))
	for _, st := range by {
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b idem.ScopeStats) int { return strings.Compare(a.Scope, b.Scope) })
	return out, nil
}

// Activity implements idem.ActivityCounter: one query across partitions
// for the records created or updated in the window, counted in Go.
func (s *Store) Activity(ctx context.Context, q idem.ActivityQuery) ([]idem.ScopeActivity, error) {
	q, err := storekit.PrepareActivity(q)
	if err != nil {
		return nil, err
	}
	params := []azcosmos.QueryParameter{{Name: "@from", Value: ms(q.From)}, {Name: "@to", Value: msAfter(q.To())}}
	text := "SELECT c.scope, c.state, c.attempts, c.created, c.updated FROM c WHERE " + isRecord +
		" AND ((c.created >= @from AND c.created < @to) OR (c.updated >= @from AND c.updated < @to))"
	if q.Scope != "" {
		text += " AND c.scope = @scope"
		params = append(params, azcosmos.QueryParameter{Name: "@scope", Value: q.Scope})
	}
	tally := storekit.NewActivityTally(q)
	err = s.query(ctx, text, "", params, -1, func(b []byte) (bool, error) {
		var d recordDoc
		if err := json.Unmarshal(b, &d); err != nil {
			return false, err
		}
		tally.Record(d.record())
		return true, nil
	})
	if err != nil {
		return nil, wrap("activity", err)
	}
	return tally.Result(), nil
}
