package postgres_test

import (
	"context"
	"crypto/md5"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/postgres"
)

var sizeTables = flag.String("sizetables", "", "BenchmarkAtSize: comma-separated records tables already holding "+
	"many records (idem bench --prefill loads them), each measured beside an empty table")

// BenchmarkAtSize measures two-phase claims (Guard.Do, empty handler) and
// the transactional inbox (DoTx, no business write) on an empty table and
// on each table named by -sizetables, interleaved round by round in
// rotating order so that the machine's load hits every side alike. Each of
// the b.N rounds runs 400 operations of each mode on each side. Metrics per
// side: operations per second, p99 latency, and the rate over the empty
// table's. Keys are random (32 hex digits) in the scope of idem bench's
// prefill, so each new key lands on a random leaf of the primary key, as
// random message ids (UUIDv4) do. Without -sizetables it is skipped.
//
//	idem bench --store 'postgres://…/test?table=big' --prefill 10000000 --duration 1s
//	go test -run '^$' -bench AtSize -benchtime=6x ./store/postgres/ -args -sizetables=big
func BenchmarkAtSize(b *testing.B) {
	if *sizeTables == "" {
		b.Skip("no -sizetables: name tables loaded with idem bench --prefill")
	}
	pool := testPool(b)
	type side struct {
		name string
		g    *idem.Guard
		s    *postgres.Store
		lat  map[string][]time.Duration
		took map[string]time.Duration
	}
	newSide := func(name string, s *postgres.Store) *side {
		g, err := idem.New(s, idem.Options{Scope: "idem-prefill", Retention: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		return &side{name: name, g: g, s: s, lat: map[string][]time.Duration{}, took: map[string]time.Duration{}}
	}
	sides := []*side{newSide("empty", newStore(b, postgres.Options{}))}
	for _, t := range strings.Split(*sizeTables, ",") {
		s, err := postgres.New(pool, postgres.Options{Table: t})
		if err != nil {
			b.Fatal(err)
		}
		sides = append(sides, newSide(t, s))
	}
	run := map[string]func(ctx context.Context, sd *side, id string) error{
		"twophase": func(ctx context.Context, sd *side, id string) error {
			_, err := sd.g.Do(ctx, idem.Message{ID: id}, func(context.Context) ([]byte, error) { return nil, nil })
			return err
		},
		"inbox": func(ctx context.Context, sd *side, id string) error {
			_, err := idem.DoTx(ctx, sd.g, idem.Message{ID: id}, func(context.Context, pgx.Tx) ([]byte, error) { return nil, nil })
			return err
		},
	}
	modes := []string{"twophase", "inbox"}
	const perRound = 400
	runID := time.Now().UnixNano()
	b.ResetTimer()
	for r := range b.N {
		for j := range sides {
			sd := sides[(r+j)%len(sides)]
			for _, m := range modes {
				var mu sync.Mutex
				lat := make([]time.Duration, 0, perRound)
				took := runWorkers(b, perRound, func(ctx context.Context, seq int64) error {
					t0 := time.Now()
					err := run[m](ctx, sd, fmt.Sprintf("%x", md5.Sum(fmt.Appendf(nil, "%d-%d", runID, seq))))
					d := time.Since(t0)
					mu.Lock()
					lat = append(lat, d)
					mu.Unlock()
					return err
				})
				sd.lat[m] = append(sd.lat[m], lat...)
				sd.took[m] += took
			}
		}
	}
	b.StopTimer()
	for _, m := range modes {
		rate := func(sd *side) float64 { return float64(len(sd.lat[m])) / sd.took[m].Seconds() }
		empty := rate(sides[0])
		for _, sd := range sides {
			l := slices.Clone(sd.lat[m])
			slices.Sort(l)
			b.ReportMetric(rate(sd), m+"/s@"+sd.name)
			b.ReportMetric(float64(l[len(l)*99/100].Microseconds())/1000, m+"-p99-ms@"+sd.name)
			if sd != sides[0] {
				b.ReportMetric(rate(sd)/empty, m+"-vs-empty@"+sd.name)
			}
		}
	}
}
