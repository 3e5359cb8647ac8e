// Package sqlpubsub runs broker/brokertest on watermill-sql, a Pub/Sub on
// PostgreSQL: durable, with competing consumers of one consumer group. It
// is in broker/watermill/internal/integration, a module of its own, so that
// broker/watermill's users carry no SQL driver.
package sqlpubsub

import (
	"context"
	stdsql "database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/idemgo/idem/broker/brokertest"
	"github.com/idemgo/idem/broker/watermill/internal/integration/suite"
	"github.com/idemgo/idem/internal/testenv"
)

// TestConformance: each subtest gets topics of its own (tables of their
// own); every consumer it starts subscribes in one consumer group on a
// connection pool of its own, which Kill cuts (pg_terminate_backend), as a
// crash would: its transaction, and so its ack, never commits.
func TestConformance(t *testing.T) {
	dsn := testenv.Postgres.Need(t)
	admin, err := stdsql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	pub, err := sql.NewPublisher(sql.BeginnerFromStdSQL(admin), sql.PublisherConfig{SchemaAdapter: schema, AutoInitializeSchema: true}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	var consumers atomic.Int64
	brokertest.Run(t, func(t *testing.T) brokertest.Broker {
		var (
			mu   sync.Mutex
			apps = map[message.Subscriber]string{}
		)
		newSub := func() (message.Subscriber, error) {
			app := fmt.Sprintf("idem-watermill-%d-%d", time.Now().UnixNano(), consumers.Add(1))
			db, err := stdsql.Open("pgx", dsn+"&application_name="+app)
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { db.Close() })
			sub, err := sql.NewSubscriber(sql.BeginnerFromStdSQL(db), sql.SubscriberConfig{
				ConsumerGroup: "suite", SchemaAdapter: schema, OffsetsAdapter: sql.DefaultPostgreSQLOffsetsAdapter{},
				InitializeSchema: true, PollInterval: 20 * time.Millisecond, ResendInterval: 20 * time.Millisecond, RetryInterval: 20 * time.Millisecond,
			}, watermill.NopLogger{})
			if err != nil {
				return nil, err
			}
			mu.Lock()
			apps[sub] = app
			mu.Unlock()
			return sub, nil
		}
		b := suite.NewBroker(t, pub, newSub, sqlFeatures)
		b.Crash = func(sub message.Subscriber) {
			mu.Lock()
			app := apps[sub]
			mu.Unlock()
			if _, err := admin.Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, app); err != nil {
				t.Errorf("crash %s: %v", app, err)
			}
		}
		t.Cleanup(func() {
			for _, topic := range b.Topics() {
				for _, table := range []string{`"watermill_` + topic + `"`, `"watermill_offsets_` + topic + `"`} {
					admin.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+table)
				}
			}
		})
		return b
	})
}

// schema stores payloads as BYTEA (the suite's are not all JSON), read one
// message at a time (a batch is redelivered whole after a crash).
var schema = sql.DefaultPostgreSQLSchema{GeneratePayloadType: func(string) string { return "BYTEA" }, SubscribeBatchSize: 1}

// sqlFeatures: watermill-sql keeps the messages and hands each of a
// consumer group's messages to one subscriber; it counts no deliveries,
// and a message carries no position.
var sqlFeatures = brokertest.Features{Skip: map[string]string{
	"GracefulStopSettlesEverything": "Watermill's router closes the subscriber before its in-flight handlers return (Router.Close): " +
		"the ack of a message handled at that moment is lost and it comes back, a duplicate that idem acks without applying it again",
	"LastDeliveryCrash": "Watermill counts no deliveries",
	"ConflictDeadLetterHeaders": "a Watermill message carries no broker position (sequence, offset); " +
		"idem's headers on a conflict are checked by DeadLetterHeadersEveryReason",
}}
