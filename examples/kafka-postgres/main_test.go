package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/broker/kafka"
	"github.com/idemgo/idem/internal/testenv"
)

// TestRun runs the consumer against an in-process Kafka cluster and the
// local PostgreSQL: every order is charged once whatever is re-sent, and the
// reused order id lands in the dead-letter topic.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pgURL := schemaURL(t, ctx, testenv.Postgres.Need(t))

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"), kfake.SeedTopics(1, "orders.dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()

	sends := []order{
		{"o-1", 1500}, {"o-2", 700}, {"o-1", 1500}, // a producer retry
		{"o-3", 990}, {"o-2", 700}, {"o-1", 1500},
		{"o-3", 5000}, // the id reused with another amount: a conflict
	}
	want := map[string]int64{"o-1": 1500, "o-2": 700, "o-3": 990}
	for _, o := range sends {
		if err := sendOrder(ctx, producer, "orders", o); err != nil {
			t.Fatal(err)
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, config{
			Brokers: cluster.ListenAddrs(), PostgresURL: pgURL,
			Topic: "orders", DeadLetter: "orders.dlq", Group: "billing",
			Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
			ClientOpts: []kgo.Opt{kgo.FetchMaxWait(100 * time.Millisecond)},
		})
	}()

	// Done when the group has committed every offset: each record is
	// charged, skipped or dead-lettered, and its outcome durable.
	adm := kadm.NewClient(producer)
	for !committedAll(ctx, adm) {
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v", err)
		case <-ctx.Done():
			t.Fatal("offsets not committed in time")
		case <-time.After(50 * time.Millisecond): // polling interval
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}

	pool, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	got := map[string]int64{}
	rows, err := pool.Query(ctx, `SELECT order_id, amount_cents FROM charges`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var id string
		var amount int64
		if err := rows.Scan(&id, &amount); err != nil {
			t.Fatal(err)
		}
		got[id] = amount
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(want) || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%d charges %v, want one per order %v", n, got, want)
	}

	ends, err := adm.ListEndOffsets(ctx, "orders.dlq")
	if err != nil {
		t.Fatal(err)
	}
	if end, _ := ends.Lookup("orders.dlq", 0); end.Offset != 1 {
		t.Fatalf("dead letters: %d, want 1", end.Offset)
	}
	dlq := readAll(t, ctx, cluster.ListenAddrs(), "orders.dlq", 1)
	if len(dlq) != 1 {
		t.Fatalf("read %d dead letters, want 1", len(dlq))
	}
	headers := map[string]string{}
	for _, h := range dlq[0].Headers {
		headers[h.Key] = string(h.Value)
	}
	if headers[kafka.HeaderReason] != "conflict" || headers[kafka.DefaultKeyHeader] != "o-3" ||
		string(dlq[0].Value) != `{"id":"o-3","amount_cents":5000}` {
		t.Errorf("dead letter %s with headers %v, want the conflicting o-3", dlq[0].Value, headers)
	}
}

// schemaURL creates a schema of its own for the test and returns a URL whose
// connections use it.
func schemaURL(t *testing.T, ctx context.Context, base string) string {
	t.Helper()
	pool, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := fmt.Sprintf("example_kafka_%d", time.Now().UnixNano())
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Error(err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema) // pgx sends unknown parameters as run-time settings
	u.RawQuery = q.Encode()
	return u.String()
}

// committedAll reports whether the billing group committed every partition's
// end offset.
func committedAll(ctx context.Context, adm *kadm.Client) bool {
	ends, err := adm.ListEndOffsets(ctx, "orders")
	if err != nil {
		return false
	}
	committed, err := adm.FetchOffsets(ctx, "billing")
	if err != nil {
		return false
	}
	all := true
	ends.Each(func(end kadm.ListedOffset) {
		c, ok := committed.Lookup("orders", end.Partition)
		if end.Offset > 0 && (!ok || c.At < end.Offset) {
			all = false
		}
	})
	return all
}

// readAll reads want records from the start of topic.
func readAll(t *testing.T, ctx context.Context, brokers []string, topic string, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want && ctx.Err() == nil {
		out = append(out, cl.PollFetches(ctx).Records()...)
	}
	return out
}
