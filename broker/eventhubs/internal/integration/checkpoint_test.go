package integration_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/brokertest"
	"github.com/idemgo/idem/broker/eventhubs"
	"github.com/idemgo/idem/broker/eventhubs/checkpointstore"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/store/postgres"
)

// pgBackend is a schema of its own on PostgreSQL: idem's records, the
// checkpoint store's tables and an effects table with no unique
// constraint, so that an effect applied twice shows as two rows.
type pgBackend struct {
	pool    *pgxpool.Pool
	schema  string
	store   *postgres.Store
	cps     *checkpointstore.Store
	effects string
}

func openPG(t testing.TB) *pgBackend {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testenv.Postgres.Need(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b := &pgBackend{pool: pool, schema: "idem_eh_" + suffix(t)}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+b.schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA "+b.schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", b.schema, err)
		}
	})
	if b.store, err = postgres.New(pool, postgres.Options{Table: b.schema + ".idem_records"}); err != nil {
		t.Fatal(err)
	}
	if err := b.store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	b.cps, err = checkpointstore.New(b.store, checkpointstore.Options{
		OwnershipTable: b.schema + ".ownership", CheckpointTable: b.schema + ".checkpoints"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.cps.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	b.effects = b.schema + ".effects"
	if _, err := pool.Exec(ctx, `CREATE TABLE `+b.effects+` (id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *pgBackend) count(t testing.TB, q string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func suffix(t testing.TB) string {
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// TestCheckpointStoreClaims: ownership claims as the Processor makes
// them. A partition never owned goes to the first claim without an ETag;
// a claim goes through only on the stored ETag, which it changes, so
// that of two claims on one ETag one wins. On each database.
func TestCheckpointStoreClaims(t *testing.T) { eachBackend(t, testClaims) }

func testClaims(t *testing.T, b *cpBackend) {
	ctx := context.Background()
	own := func(owner string, etag *azcore.ETag) azeventhubs.Ownership {
		return azeventhubs.Ownership{FullyQualifiedNamespace: "ns", EventHubName: "h", ConsumerGroup: "$Default",
			PartitionID: "0", OwnerID: owner, ETag: etag}
	}
	got, err := b.cps.ClaimOwnership(ctx, []azeventhubs.Ownership{own("a", nil)}, nil)
	if err != nil || len(got) != 1 || got[0].ETag == nil {
		t.Fatalf("first claim: %v %+v", err, got)
	}
	tag := got[0].ETag
	if got, err := b.cps.ClaimOwnership(ctx, []azeventhubs.Ownership{own("b", nil)}, nil); err != nil || len(got) != 0 {
		t.Fatalf("a second claim without an ETag: %v %+v", err, got)
	}
	got, err = b.cps.ClaimOwnership(ctx, []azeventhubs.Ownership{own("b", tag)}, nil)
	if err != nil || len(got) != 1 || *got[0].ETag == *tag {
		t.Fatalf("a claim on the stored ETag: %v %+v", err, got)
	}
	if got, err := b.cps.ClaimOwnership(ctx, []azeventhubs.Ownership{own("c", tag)}, nil); err != nil || len(got) != 0 {
		t.Fatalf("a claim on a stale ETag: %v %+v", err, got)
	}
	list, err := b.cps.ListOwnership(ctx, "ns", "h", "$Default", nil)
	if err != nil || len(list) != 1 || list[0].OwnerID != "b" || time.Since(list[0].LastModifiedTime) > time.Minute {
		t.Fatalf("ListOwnership: %v %+v", err, list)
	}
	seq := func(n int64) azeventhubs.Checkpoint {
		off := fmt.Sprint(n * 100)
		return azeventhubs.Checkpoint{FullyQualifiedNamespace: "ns", EventHubName: "h", ConsumerGroup: "$Default",
			PartitionID: "0", SequenceNumber: &n, Offset: &off}
	}
	for _, n := range []int64{5, 3} { // never back
		if err := b.cps.SetCheckpoint(ctx, seq(n), nil); err != nil {
			t.Fatal(err)
		}
	}
	cps, err := b.cps.ListCheckpoints(ctx, "ns", "h", "$Default", nil)
	if err != nil || len(cps) != 1 || *cps[0].SequenceNumber != 5 || *cps[0].Offset != "500" {
		t.Fatalf("ListCheckpoints: %v %+v", err, cps)
	}
}

// TestCheckpointModeTwoProcessors: HandleCheckpoint on PostgreSQL with two
// Processors balancing the partitions through the checkpoint store in the
// same database. The second joins mid-stream and takes partitions from
// the first, which is then killed (its transactions in flight roll back or
// commit, nothing else it does lands); then every checkpoint is lost and a
// third consumer reads the hub from the start. Each event's effect is one
// row: nothing applied twice, nothing skipped. On each database.
func TestCheckpointModeTwoProcessors(t *testing.T) { eachBackend(t, testTwoProcessors) }

func testTwoProcessors(t *testing.T, pg *cpBackend) {
	const n = 400
	b := newSuiteBroker(t)
	b.cps = pg.cps
	g, err := eventhubs.NewGuard(pg.store, b.hub, azeventhubs.DefaultConsumerGroup, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var settled, dups, applied atomic.Int64
	c := brokertest.Consumer{Guard: g, Hooks: broker.Hooks[idem.Message]{
		AfterSettle: func(_ context.Context, _ idem.Message, r broker.Report) {
			settled.Add(1)
			if r.Result.Outcome == idem.OutcomeDuplicate {
				dups.Add(1)
			}
		}}}
	h := pg.handler(func() { applied.Add(1); time.Sleep(3 * time.Millisecond) })
	stream(t, b, "cp", n)
	first, err := b.start(c, h)
	if err != nil {
		t.Fatal(err)
	}
	owners := `SELECT count(DISTINCT owner_id) FROM ` + pg.ownership + ` WHERE length(owner_id) > 0`
	waitFor(t, "the first consumer owning every partition", func() bool {
		return pg.count(t, `SELECT count(*) FROM `+pg.ownership+` WHERE length(owner_id) > 0`) == suitePartitions
	})
	second, err := b.start(c, h)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the partitions balanced between the two", func() bool { return pg.count(t, owners) == 2 })
	if pg.count(t, `SELECT count(*) FROM `+pg.effect) == n {
		t.Fatal("the stream ended before ownership moved")
	}
	first.Kill()
	waitFor(t, "every event applied", func() bool { return pg.count(t, `SELECT count(DISTINCT id) FROM `+pg.effect) == n })
	if err := second.Stop(); err != nil {
		t.Fatal(err)
	}
	pg.checkOnce(t, n)
	t.Logf("%d settled, %d duplicates, %d handler runs (the rolled back ones too)", settled.Load(), dups.Load(), applied.Load())

	// Every checkpoint lost: the hub is read again from the start, and the
	// keys' markers make every event a duplicate.
	if err := pg.exec(context.Background(), `DELETE FROM `+pg.checkpoints); err != nil {
		t.Fatal(err)
	}
	settled.Store(0)
	dups.Store(0)
	third, err := b.start(c, h)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the hub read again", func() bool { return settled.Load() >= n })
	if err := third.Stop(); err != nil {
		t.Fatal(err)
	}
	pg.checkOnce(t, n)
	if d := dups.Load(); d != n {
		t.Fatalf("%d duplicates after the checkpoints were lost, want %d", d, n)
	}
	if cps := pg.count(t, `SELECT count(*) FROM `+pg.checkpoints); cps != suitePartitions {
		t.Fatalf("%d checkpoint rows, want %d", cps, suitePartitions)
	}
}

// TestCheckpointModeRefusesOtherStores: HandleCheckpoint under a Processor
// whose CheckpointStore does not write in the transaction fails each event
// with ErrNoTxCheckpoints, and nothing is applied.
func TestCheckpointModeRefusesOtherStores(t *testing.T) {
	pg := openPG(t)
	b := newSuiteBroker(t) // on the in-memory checkpoint store
	g, err := eventhubs.NewGuard(pg.store, b.hub, azeventhubs.DefaultConsumerGroup, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	refused := make(chan error, 1)
	report := func(err error) {
		select {
		case refused <- err:
		default:
		}
	}
	c := brokertest.Consumer{Guard: g, Hooks: broker.Hooks[idem.Message]{
		OnError:     report,
		AfterSettle: func(_ context.Context, _ idem.Message, r broker.Report) { report(r.Err) },
	}}
	stream(t, b, "x", 1)
	r, err := b.start(c, pg.handler(nil))
	if err != nil {
		t.Fatal(err)
	}
	var got error
	select {
	case got = <-refused:
	case <-time.After(30 * time.Second):
	}
	r.Stop()
	if !errors.Is(got, eventhubs.ErrNoTxCheckpoints) {
		t.Fatalf("error %v, want ErrNoTxCheckpoints", got)
	}
	if rows := pg.count(t, `SELECT count(*) FROM `+pg.effects); rows != 0 {
		t.Fatalf("%d effects applied", rows)
	}
}
