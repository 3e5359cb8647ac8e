package redisstore_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	redisstore "github.com/idemgo/idem/store/redis"
	"github.com/idemgo/idem/store/storetest"
)

// TestClusterConformance runs the conformance suite against a Redis Cluster
// named by IDEM_REDIS_CLUSTER (comma-separated seed addresses). It is
// skipped when the variable is unset: CI has a single node. A throwaway
// three-master cluster for it:
//
//	for p in 7101 7102 7103; do redis-server --port $p --cluster-enabled yes \
//	  --cluster-config-file nodes-$p.conf --save "" --appendonly no --daemonize yes; done
//	redis-cli --cluster create 127.0.0.1:7101 127.0.0.1:7102 127.0.0.1:7103 --cluster-yes
//	IDEM_REDIS_CLUSTER=127.0.0.1:7101 go test -run Cluster ./store/redis
func TestClusterConformance(t *testing.T) {
	addrs := os.Getenv("IDEM_REDIS_CLUSTER")
	if addrs == "" {
		t.Skip("IDEM_REDIS_CLUSTER is not set (comma-separated cluster seed addresses)")
	}
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: strings.Split(addrs, ",")})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	newStore := func(t *testing.T) *redisstore.Store {
		p := "idemtest:" + runID + ":c" + strconv.FormatInt(prefixSeq.Add(1), 10)
		t.Cleanup(func() {
			_ = c.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
				keys, _ := n.Keys(ctx, p+":*").Result() // throwaway test cluster
				for _, k := range keys {
					n.Del(ctx, k)
				}
				return nil
			})
		})
		s, err := redisstore.New(c, redisstore.Options{Prefix: p})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	storetest.Run(t, func(t *testing.T) idem.Store { return newStore(t) })

	t.Run("InspectorAcrossMasters", func(t *testing.T) {
		s := newStore(t)
		now := storetest.T0
		reqs := make([]idem.ClaimRequest, 300)
		for i := range reqs {
			reqs[i] = idem.ClaimRequest{Key: idem.Key{Scope: "cl", ID: "k" + strconv.FormatInt(int64(i), 10)}, Now: now,
				LeaseUntil: now.Add(60e9), ExpiresAt: now.Add(3600e9)}
		}
		if _, err := s.ClaimBatch(ctx, reqs); err != nil {
			t.Fatal(err)
		}
		recs, err := s.List(ctx, idem.ListFilter{Limit: 1000})
		if err != nil || len(recs) != 300 {
			t.Fatalf("List across masters = %d records, %v; want 300", len(recs), err)
		}
		st, err := s.Stats(ctx, now)
		if err != nil || len(st) != 1 || st[0].InProgress != 300 {
			t.Fatalf("Stats = %+v, %v", st, err)
		}
		total := 0
		for range 20 {
			n, err := s.Sweep(ctx, idem.SweepRequest{Now: now.Add(7200e9), Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			total += n
		}
		if total != 300 {
			t.Fatalf("swept %d across masters, want 300", total)
		}
	})
}
