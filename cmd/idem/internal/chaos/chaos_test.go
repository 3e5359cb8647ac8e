package chaos

import (
	"context"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem/internal/testenv"
)

func TestMain(m *testing.M) {
	if IsChild() {
		os.Exit(ChildMain())
	}
	os.Exit(m.Run())
}

// runShort runs the short form on the harness's private servers: skipped
// when a server binary is absent, failed then under IDEM_REQUIRE_SERVICES=1.
//
// The short forms run in parallel: each has its own servers on private
// ports (and its own queues on the shared RabbitMQ), and a run mostly
// waits (for leases, sessions, restarts), so together they take about as
// long as the longest.
func runShort(t *testing.T, cfg Config) *Result {
	t.Helper()
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg.Progress = testWriter{t}
	res, err := Run(ctx, cfg)
	if IsNoServer(err) {
		if testenv.Required() {
			t.Fatalf("%v [IDEM_REQUIRE_SERVICES=1]", err)
		}
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + res.Table())
	if !res.VerdictOK {
		t.Fatalf("verdict failed: %v", res.Problems)
	}
	if res.Kills == 0 || res.Restarts == 0 {
		t.Errorf("no kills (%d) or no restarts (%d): the chaos did nothing", res.Kills, res.Restarts)
	}
	if res.Naive == nil || res.NaiveDoubles == 0 {
		t.Errorf("the naive consumer found no doubles")
	}
	return res
}

// TestShortFormInbox is the CI short form of idem chaos for the
// transactional inbox on PostgreSQL, with the delivery limit of issue 27:
// 3000 orders, four consumer processes, SIGKILLs at the hooks and at
// random, three PostgreSQL restarts in immediate mode and one nats-server
// restart, the durable consumer's MaxDeliver at 4. A store outage must
// spend none of the four deliveries: nothing dead-lettered that the
// handler never failed, nothing lost; the orders the handler fails every
// time end dead-lettered after four failures.
func TestShortFormInbox(t *testing.T) {
	res := runShort(t, Config{Store: "postgres", Orders: shortOrders(3000), Consumers: 4, StoreRestarts: 3, MaxDeliver: 4})
	if res.Idem.StoreRestart == 0 {
		t.Errorf("no PostgreSQL restart: the outage the delivery limit must survive did not happen")
	}
	if res.Idem.FailedDL == 0 {
		t.Errorf("no order dead-lettered after the handler's failures (%d failures injected)", res.Idem.HandlerFailures)
	}
}

// TestShortFormTwoPhase is the short form for two-phase on Redis with the
// bank: the bank receives a call per attempt and applies one per key.
func TestShortFormTwoPhase(t *testing.T) {
	res := runShort(t, Config{Store: "redis", Orders: shortOrders(3000)})
	if want := res.Orders - res.Idem.FailedDL; res.Idem.BankApplied != want {
		t.Errorf("bank applied %d charges, want one per order not dead-lettered (%d)", res.Idem.BankApplied, want)
	}
	if res.Idem.BankCalls < res.Idem.BankApplied {
		t.Errorf("bank calls %d < applied %d", res.Idem.BankCalls, res.Idem.BankApplied)
	}
}

// TestShortFormMariaDBRabbitMQ is the short form for the transactional
// inbox on a private MariaDB (two SIGKILL restarts) over queues of this run
// on the machine's RabbitMQ (never restarted).
func TestShortFormMariaDBRabbitMQ(t *testing.T) {
	res := runShort(t, Config{Store: "mysql", Broker: "amqp", Orders: shortOrders(3000)})
	if res.Idem.BrokerRestrt != 0 {
		t.Errorf("the shared RabbitMQ was restarted %d times", res.Idem.BrokerRestrt)
	}
}

// TestShortFormSQLiteKafka is the short form for the transactional inbox
// on one SQLite file shared by the consumer processes (no server: no store
// restarts) over Kafka on the harness's kfake (one restart). It has 1500
// orders: every kill costs a Kafka group a rebalance (the killed member's
// session must end first), which makes this variant the slowest by far.
func TestShortFormSQLiteKafka(t *testing.T) {
	res := runShort(t, Config{Store: "sqlite", Broker: "kafka", Orders: shortOrders(1500)})
	if res.Idem.StoreRestart != 0 {
		t.Errorf("SQLite has no server, yet %d store restarts", res.Idem.StoreRestart)
	}
}

// TestShortFormSQLiteRedisStreams is the short form for the transactional
// inbox on SQLite over Redis Streams on a redis-server of the harness's own
// (apart from any store's), SIGKILLed and started again on its append-only
// file mid-run: a consumer group whose killed members' entries the others
// claim (XAUTOCLAIM), dead letters on a stream of their own.
func TestShortFormSQLiteRedisStreams(t *testing.T) {
	res := runShort(t, Config{Store: "sqlite", Broker: "redisstream", Orders: shortOrders(600), RandomKills: 2})
	wantRestartAndDeliveries(t, res, "redis-server")
}

// wantRestartAndDeliveries checks that the broker server was restarted and
// that the consumers counted a delivery at least for every message.
func wantRestartAndDeliveries(t *testing.T, res *Result, server string) {
	t.Helper()
	if res.Idem.BrokerRestrt == 0 {
		t.Errorf("no %s restart", server)
	}
	if res.Deliveries < res.Idem.Messages {
		t.Errorf("%d deliveries counted for %d messages", res.Deliveries, res.Idem.Messages)
	}
}

// TestShortFormSQLiteMQTT is the short form for the transactional inbox
// on SQLite over MQTT on a mosquitto of the harness's own, restarted
// mid-run (SIGTERM: it saves its persistence file on shutdown): a shared
// subscription of persistent sessions named by consumer slot, so a
// restarted consumer resumes its killed predecessor's unacked messages;
// dead letters on a topic of their own.
func TestShortFormSQLiteMQTT(t *testing.T) {
	res := runShort(t, Config{Store: "sqlite", Broker: "mqtt", Orders: shortOrders(400), RandomKills: 2})
	wantRestartAndDeliveries(t, res, "mosquitto")
}

// TestShortFormPostgresSQS is the short form on SQS: sqstest hosted by the
// harness, the consumer processes on the real aws-sdk-go-v2 client,
// PostgreSQL restarted under them (sqstest is in memory and never is).
func TestShortFormPostgresSQS(t *testing.T) {
	res := runShort(t, Config{Store: "postgres", Broker: "sqs", Orders: shortOrders(600), RandomKills: 2})
	if res.Idem.BrokerRestrt != 0 || res.Idem.StoreRestart == 0 || res.Deliveries < res.Orders {
		t.Errorf("%d broker and %d store restarts, %d deliveries of %d orders: want PostgreSQL restarted, sqstest never, every order delivered",
			res.Idem.BrokerRestrt, res.Idem.StoreRestart, res.Deliveries, res.Orders)
	}
}

// TestShortFormRedisPubSub is the short form on Pub/Sub: pstest hosted by
// the harness, the consumer processes on the real client's streaming pull,
// two-phase on a Redis restarted under them (pstest is in memory and never
// is).
func TestShortFormRedisPubSub(t *testing.T) {
	res := runShort(t, Config{Store: "redis", Broker: "pubsub", Orders: shortOrders(400), RandomKills: 2})
	if res.Idem.BrokerRestrt != 0 || res.Idem.StoreRestart == 0 || res.Deliveries < res.Orders {
		t.Errorf("%d broker and %d store restarts, %d deliveries of %d orders: want Redis restarted, pstest never, every order delivered",
			res.Idem.BrokerRestrt, res.Idem.StoreRestart, res.Deliveries, res.Orders)
	}
}

// TestShortFormPostgresServiceBus is the short form on Azure Service Bus:
// servicebustest hosted by the harness, the consumer processes on the real
// azservicebus client by its connection string, PostgreSQL restarted under
// them (servicebustest is in memory and never is), the queue's
// MaxDeliveryCount at 4 with the consumers' MaxDeliveries to match: the
// orders the handler fails every time end dead-lettered by the consumer.
func TestShortFormPostgresServiceBus(t *testing.T) {
	res := runShort(t, Config{Store: "postgres", Broker: "servicebus", Orders: shortOrders(400), RandomKills: 2, MaxDeliver: 4})
	if res.Idem.BrokerRestrt != 0 || res.Idem.StoreRestart == 0 || res.Deliveries < res.Orders {
		t.Errorf("%d broker and %d store restarts, %d deliveries of %d orders: want PostgreSQL restarted, servicebustest never, every order delivered",
			res.Idem.BrokerRestrt, res.Idem.StoreRestart, res.Deliveries, res.Orders)
	}
}

// shortOrders is the short form's size: def, or IDEM_CHAOS_ORDERS.
func shortOrders(def int) int {
	if n, err := strconv.Atoi(os.Getenv("IDEM_CHAOS_ORDERS")); err == nil && n > 0 {
		return n
	}
	return def
}

func TestPlanIsSeeded(t *testing.T) {
	a, b, c := NewPlan(7, 2000), NewPlan(7, 2000), NewPlan(8, 2000)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed drew two plans")
	}
	if reflect.DeepEqual(a, c) {
		t.Fatal("two seeds drew one plan")
	}
	kinds := map[string]int{}
	for _, m := range a.Msgs {
		kinds[m.Kind]++
	}
	for _, k := range []string{kindOrder, kindRetry, kindConflict, kindBadData, kindNoKey} {
		if kinds[k] == 0 {
			t.Errorf("no %s in 2000 orders: %v", k, kinds)
		}
	}
	if a.Unique() != 2000 {
		t.Errorf("unique %d, want 2000", a.Unique())
	}
	// A re-send or reuse comes after its original.
	seen := map[string]bool{}
	for _, m := range a.Msgs {
		if (m.Kind == kindRetry || m.Kind == kindConflict) && !seen[m.ID] {
			t.Errorf("%s of %s before the original", m.Kind, m.ID)
		}
		seen[m.ID] = true
	}
}

func TestScheduleIsSeeded(t *testing.T) {
	cfg := Config{Store: "postgres", Seed: 3}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(schedule(cfg), schedule(cfg)) {
		t.Fatal("the same seed drew two schedules")
	}
	p1, n1 := arming(cfg, 1, 4, 3000)
	p2, n2 := arming(cfg, 1, 4, 3000)
	if p1 != p2 || n1 != n2 {
		t.Fatal("the same seed armed one incarnation twice differently")
	}
	cfg.RandomKills, cfg.StoreRestarts, cfg.BrokerRestarts = -1, -1, -1
	if fs := schedule(cfg); len(fs) != 0 {
		t.Fatalf("negative counts scheduled %v", fs)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestStaleCheckSeesAnOrphan: the verdict's stale in-progress count finds
// a claim whose lease ran out, on each store, so its zero means something.
func TestStaleCheckSeesAnOrphan(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	starts := map[string]func(context.Context) (Server, error){
		"redis": StartRedis, "postgres": StartPostgres, "mysql": StartMariaDB, "sqlite": StartSQLite,
	}
	for _, kind := range []string{"redis", "postgres", "mysql", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			start := starts[kind]
			srv, err := start(ctx)
			if IsNoServer(err) && !testenv.Required() {
				t.Skip(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Stop()
			cfg := Config{Store: kind}
			e := &env{store: srv}
			tbl := passTables(false)
			prefix := "idemchaos:orphan"
			if kind != "redis" {
				if err := setupStore(ctx, cfg, e, tbl, prefix); err != nil {
					t.Fatal(err)
				}
			}
			if n, err := staleInProgress(ctx, cfg, e, tbl, prefix); err != nil || n != 0 {
				t.Fatalf("empty store: %d stale, %v", n, err)
			}
			if err := orphan(ctx, kind, srv.URL(), tbl, prefix); err != nil {
				t.Fatal(err)
			}
			if n, err := staleInProgress(ctx, cfg, e, tbl, prefix); err != nil || n != 1 {
				t.Fatalf("one orphaned claim: %d stale, %v", n, err)
			}
		})
	}
}

// TestShortFormPostgresEventHubs is the short form on Azure Event Hubs:
// eventhubstest hosted by the harness, the consumer processes on the real
// azeventhubs client by its connection string, each a Processor
// balancing the hub's partitions through checkpointstore on PostgreSQL,
// SIGKILLed between an event's commit and its batch's checkpoint (and at
// random), PostgreSQL restarted under them (eventhubstest is in memory
// and never is), the consumers' MaxDeliveries at 4: the orders the
// handler fails every time end dead-lettered by the consumer.
func TestShortFormPostgresEventHubs(t *testing.T) {
	res := runShort(t, Config{Store: "postgres", Broker: "eventhubs", Orders: shortOrders(400), RandomKills: 2, MaxDeliver: 4})
	if res.Idem.BrokerRestrt != 0 || res.Idem.StoreRestart == 0 || res.Deliveries < res.Orders || res.Idem.PointKills == 0 {
		t.Errorf("%d broker and %d store restarts, %d point kills, %d deliveries of %d orders: want PostgreSQL restarted, eventhubstest never, kills at the hooks, every order delivered",
			res.Idem.BrokerRestrt, res.Idem.StoreRestart, res.Idem.PointKills, res.Deliveries, res.Orders)
	}
}
