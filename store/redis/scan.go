package redisidem

import (
	"context"
	"sort"
	"sync"

	goredis "github.com/redis/go-redis/v9"
)

// scanCount is the COUNT hint of each SCAN call: large enough to make few
// round trips, small enough that one call never blocks Redis noticeably.
const scanCount = 500

// scanNode is one server to SCAN: SCAN walks the keyspace of a single node,
// so a cluster (or ring) is scanned master by master.
type scanNode struct {
	addr   string
	client goredis.Cmdable
}

// nodes lists the servers holding records, sorted by address so that a sweep
// can resume where it stopped.
func (s *Store) nodes(ctx context.Context) ([]scanNode, error) {
	var (
		mu  sync.Mutex
		out []scanNode
	)
	collect := func(_ context.Context, c *goredis.Client) error {
		mu.Lock()
		out = append(out, scanNode{addr: c.Options().Addr, client: c})
		mu.Unlock()
		return nil
	}
	switch c := s.client.(type) {
	case *goredis.ClusterClient:
		if err := c.ForEachMaster(ctx, collect); err != nil {
			return nil, err
		}
	case *goredis.Ring:
		if err := c.ForEachShard(ctx, collect); err != nil {
			return nil, err
		}
	default:
		return []scanNode{{client: s.client}}, nil
	}
	sort.Slice(out, func(i, j int) bool { return out[i].addr < out[j].addr })
	return out, nil
}

// scanAll calls fn with every batch of keys matching pattern on every node
// (one full SCAN pass). SCAN returns every key present for the whole pass at
// least once, and may return one twice while Redis rehashes: List drops
// repeats, Stats may count one twice (it is an operator's estimate). No
// set of seen keys is kept, so memory stays bounded on large stores.
func (s *Store) scanAll(ctx context.Context, pattern string, fn func(keys []string) error) error {
	nodes, err := s.nodes(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		var cursor uint64
		for {
			keys, next, err := n.client.Scan(ctx, cursor, pattern, scanCount).Result()
			if err != nil {
				return err
			}
			if len(keys) > 0 {
				if err := fn(keys); err != nil {
					return err
				}
			}
			if next == 0 {
				break
			}
			cursor = next
		}
	}
	return nil
}
