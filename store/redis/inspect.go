package redisidem

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

// Redis has no secondary indexes here, so List and Stats SCAN every record
// under the prefix (on every cluster master) and read each one: O(records)
// work and round trips of scanCount keys per call. They are for operators
// (the idem command's list and stats), not for request paths. SCAN does not
// block Redis, but on a store of millions of records expect seconds.

// List implements idem.Inspector. It scans the whole prefix (or one scope's
// keys when f.Scope is set) and keeps the first f.Limit records in (scope,
// stored id) order, so memory stays bounded by the page size.
func (s *Store) List(ctx context.Context, f idem.ListFilter) ([]idem.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	limit := f.PageLimit()
	var out []idem.Record
	trim := func() {
		sort.Slice(out, func(i, j int) bool { return less(out[i], out[j]) })
		kept := out[:0]
		for _, r := range out {
			if len(kept) > 0 && kept[len(kept)-1].Scope == r.Scope && kept[len(kept)-1].ID == r.ID {
				continue // SCAN returned the key twice
			}
			kept = append(kept, r)
		}
		out = kept[:min(len(kept), limit)]
	}
	err := s.scanAll(ctx, recordPattern(s.prefix, f.Scope), func(keys []string) error {
		var want []string
		for _, k := range keys {
			scope, id, ok := parseKey(s.prefix, k)
			if !ok || (f.Scope != "" && scope != f.Scope) {
				continue
			}
			if !f.After.Before(idem.Record{Scope: scope, ID: id}) {
				continue // read only the keys the page may hold
			}
			want = append(want, k)
		}
		recs, err := s.readRecords(ctx, want)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if storekit.Match(f, r) {
				out = append(out, r)
			}
		}
		if len(out) > 2*limit {
			trim()
		}
		return nil
	})
	if err != nil {
		return nil, s.fail("list", err)
	}
	trim()
	return out, nil
}

func less(a, b idem.Record) bool {
	if a.Scope != b.Scope {
		return a.Scope < b.Scope
	}
	return a.ID < b.ID
}

// readRecords reads keys in one pipeline, skipping keys gone since the scan.
func (s *Store) readRecords(ctx context.Context, keys []string) ([]idem.Record, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	pipe := s.client.Pipeline()
	cmds := make([]*goredis.StringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Get(ctx, k)
	}
	_, _ = pipe.Exec(ctx) // judged per command: redis.Nil means deleted since the scan
	out := make([]idem.Record, 0, len(keys))
	for _, c := range cmds {
		v, err := c.Result()
		if errors.Is(err, goredis.Nil) {
			continue
		}
		if err != nil {
			return nil, err
		}
		r, err := decodeRecord(v)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Stats implements idem.Inspector with one SCAN pass over the prefix. A key
// SCAN returns twice while Redis rehashes is counted twice: the figures are
// an operator's view, not an invariant.
func (s *Store) Stats(ctx context.Context, now time.Time) ([]idem.ScopeStats, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	by := map[string]*idem.ScopeStats{}
	err := s.scanHeaders(ctx, recordPattern(s.prefix, ""), func(key, scope string, h header) error {
		r := idem.Record{Scope: scope, State: idem.State(h.fields[1])}
		var err error
		if r.LeaseUntil, r.ExpiresAt, r.CreatedAt, _, err = h.times(); err != nil {
			return fmt.Errorf("record %s: %w", key, err)
		}
		count(by, r, now)
		return nil
	})
	if err != nil {
		return nil, s.fail("stats", err)
	}
	out := make([]idem.ScopeStats, 0, len(by))
	for _, st := range by {
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Scope < out[j].Scope })
	return out, nil
}

func count(by map[string]*idem.ScopeStats, r idem.Record, now time.Time) {
	st := by[r.Scope]
	if st == nil {
		st = &idem.ScopeStats{Scope: r.Scope}
		by[r.Scope] = st
	}
	storekit.AddStats(st, r, now)
}
