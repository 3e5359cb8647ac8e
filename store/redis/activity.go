package redisidem

import (
	"context"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

var _ idem.ActivityCounter = (*Store)(nil)

// Activity implements idem.ActivityCounter with one SCAN pass over the
// prefix (the scope's keys only, with q.Scope), reading each record's
// header. Like Stats, a key SCAN returns twice while Redis rehashes is
// counted twice.
func (s *Store) Activity(ctx context.Context, q idem.ActivityQuery) ([]idem.ScopeActivity, error) {
	q, err := storekit.PrepareActivity(q)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t := storekit.NewActivityTally(q)
	err = s.scanHeaders(ctx, recordPattern(s.prefix, q.Scope), func(key, scope string, h header) error {
		r := idem.Record{Scope: scope, State: idem.State(h.fields[1])}
		var err error
		if r.Attempts, err = strconv.Atoi(h.fields[3]); err != nil {
			return fmt.Errorf("record %s: %w: attempts %q", key, errMalformed, h.fields[3])
		}
		if _, _, r.CreatedAt, r.UpdatedAt, err = h.times(); err != nil {
			return fmt.Errorf("record %s: %w", key, err)
		}
		t.Record(r)
		return nil
	})
	if err != nil {
		return nil, s.fail("activity", err)
	}
	return t.Result(), nil
}

// scanHeaders calls fn with the header of every record matching pattern,
// read in one pipeline per SCAN batch: the header alone says state, times
// and attempts, and the scope is in the key.
func (s *Store) scanHeaders(ctx context.Context, pattern string, fn func(key, scope string, h header) error) error {
	return s.scanAll(ctx, pattern, func(keys []string) error {
		pipe := s.client.Pipeline()
		cmds := make([]*goredis.StringCmd, len(keys))
		for i, k := range keys {
			cmds[i] = pipe.GetRange(ctx, k, 0, maxHeaderLen-1)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		for i, c := range cmds {
			if c.Val() == "" {
				continue // deleted since the scan
			}
			scope, _, ok := parseKey(s.prefix, keys[i])
			if !ok {
				continue
			}
			h, err := splitHeader(c.Val())
			if err != nil {
				return fmt.Errorf("record %s: %w", keys[i], err)
			}
			if err := fn(keys[i], scope, h); err != nil {
				return err
			}
		}
		return nil
	})
}
