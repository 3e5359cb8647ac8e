// Package chaos is the harness behind `idem chaos`: a producer, K consumer
// OS processes written as a user writes them (the transactional inbox on
// PostgreSQL, MariaDB or SQLite, or two-phase on Redis with the charge an
// HTTP call to a bank process that dedups by the derived key), over NATS
// JetStream, RabbitMQ, Kafka (kfake), Redis Streams, MQTT (Mosquitto),
// Amazon SQS (sqstest), Google Cloud Pub/Sub (pstest), Azure Service Bus
// (servicebustest) or Azure Event Hubs (eventhubstest),
// and a supervisor that SIGKILLs consumers at random and at the worst
// moments (through the library's BeforeSettle hook: after the commit,
// before the ack; and in the handler:
// after the side effect, before Complete), restarts them, and restarts the
// store and broker servers mid-run. The verdict is read from the effects
// only (charge rows and balances, the bank's ledger, the dead-letter
// stream, queue or topic), never from idem's counters; the same run with a naive consumer
// must find doubles, or the harness proves nothing.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Config describes one chaos run. The zero value of each field but Store
// is a default.
type Config struct {
	// Store is "postgres", "mysql" (MariaDB) or "sqlite" (the
	// transactional inbox) or "redis" (two-phase with the bank).
	Store    string
	StoreURL string // the user's store; "": a private server (a file for SQLite) the harness starts
	// Broker is "nats" (JetStream), "amqp" (RabbitMQ), "kafka" (kfake,
	// hosted by the harness), "redisstream" (Redis Streams), "mqtt"
	// (MQTT v5), "sqs" (sqstest, hosted by the harness), "pubsub"
	// (pstest, hosted by the harness), "servicebus" (servicebustest,
	// hosted by the harness) or "eventhubs" (eventhubstest, hosted by the
	// harness; its Processors' checkpoints on PostgreSQL, so Store
	// "postgres" only).
	Broker string
	// BrokerURL is the user's NATS JetStream, RabbitMQ, Redis or MQTT
	// broker; "": a private nats-server, redis-server or mosquitto, or the
	// RabbitMQ of AMQPURL (its own queues only).
	BrokerURL string
	// RestartStore and RestartBroker are shell commands that restart the
	// user's servers (with StoreURL, BrokerURL); without them the user's
	// servers are not restarted. The private servers are restarted by the
	// harness.
	RestartStore, RestartBroker string

	Orders      int    // unique orders; default 3000
	Consumers   int    // consumer processes; default 3
	Concurrency int    // handlers per consumer; default 4
	Seed        uint64 // the plan and the fault schedule; 0: 1
	// MaxDeliver is the broker's delivery limit: the durable consumer's
	// MaxDeliver on NATS, the quorum queue's x-delivery-limit on RabbitMQ
	// (with the consumer's MaxDeliveries set to match, and the queue
	// dead-lettering what it drops to the dead-letter queue, as the amqp
	// package doc says), the queue's MaxDeliveryCount on Service Bus (the
	// consumer's MaxDeliveries set to match), the consumer's MaxDeliveries
	// alone on Kafka, Redis Streams, MQTT, SQS, Pub/Sub and Event Hubs, which have no
	// broker limit here. 0: 100 on NATS, RabbitMQ and Service Bus, none on
	// the others. With a limit the plan also has orders the handler fails
	// every time, which must end dead-lettered (max_deliver).
	MaxDeliver int

	RandomKills    int  // SIGKILLs at random moments; default orders/300, at least 3
	StoreRestarts  int  // default 2
	BrokerRestarts int  // default 1
	NoPointKills   bool // no kills armed at the hooks
	SkipNaive      bool // no naive contrast run

	// Exe and Args start a child process: the harness runs Exe Args... with
	// ChildEnv set. Default: this executable, no arguments.
	Exe  string
	Args []string
	// Settle bounds the wait for the last messages once the producer is
	// done. Default 2 minutes.
	Settle time.Duration
	// Progress receives a line a second while a run goes; nil: none.
	Progress io.Writer
}

func (c *Config) defaults() error {
	switch c.Store {
	case "postgres", "mysql", "sqlite", "redis":
	case "":
		c.Store = "postgres"
	default:
		return fmt.Errorf("chaos: unknown store %q (postgres, mysql, sqlite or redis)", c.Store)
	}
	switch c.Broker {
	case "nats", "amqp", "redisstream", "mqtt":
	case "kafka", "sqs", "pubsub", "servicebus", "eventhubs":
		if c.BrokerURL != "" {
			return fmt.Errorf("chaos: %s runs on the harness's own in-process server: no broker URL", brokerNames[c.Broker])
		}
		if c.Broker == "eventhubs" && c.Store != "postgres" {
			return fmt.Errorf("chaos: %s keeps its Processors' ownership and checkpoints in broker/eventhubs/checkpointstore, on PostgreSQL: --store postgres", brokerNames[c.Broker])
		}
	case "":
		c.Broker = "nats"
	default:
		return fmt.Errorf("chaos: unknown broker %q (nats, amqp, kafka, redisstream, mqtt, sqs, pubsub, servicebus or eventhubs)", c.Broker)
	}
	// Nothing to restart: SQLite has no server, and a RabbitMQ node or a
	// broker at the user's URL is never the harness's (only the user's
	// own, with their command).
	if c.Store == "sqlite" {
		c.StoreRestarts = -1
	}
	if (c.Broker == "amqp" || c.BrokerURL != "") && c.RestartBroker == "" {
		c.BrokerRestarts = -1
	}
	// sqstest, pstest, servicebustest and eventhubstest keep what they
	// hold in memory: a restart would lose it, which neither SQS, Pub/Sub,
	// Service Bus nor Event Hubs does.
	if inMemory(c.Broker) {
		c.BrokerRestarts = -1
	}
	if c.Orders <= 0 {
		c.Orders = 3000
	}
	if c.Consumers <= 0 {
		c.Consumers = 3
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.MaxDeliver < 0 {
		return fmt.Errorf("chaos: a delivery limit of %d: it must be positive (0: the default)", c.MaxDeliver)
	}
	if c.RandomKills == 0 {
		c.RandomKills = max(3, c.Orders/300)
	}
	if c.StoreRestarts == 0 {
		c.StoreRestarts = 2
	}
	if c.BrokerRestarts == 0 {
		c.BrokerRestarts = 1
	}
	if c.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		c.Exe = exe
	}
	if c.Settle == 0 {
		c.Settle = 2 * time.Minute
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return nil
}

// Pass is the figures of one run, idem's or the naive consumer's.
type Pass struct {
	Consumer     string `json:"consumer"` // "idem" or "naive"
	Messages     int    `json:"messages"` // published, retries, reuses and poison included
	Deliveries   int    `json:"deliveries"`
	PointKills   int    `json:"point_kills"`  // SIGKILLs at the hook points
	RandomKills  int    `json:"random_kills"` // SIGKILLs from the supervisor
	Crashes      int    `json:"crashes"`      // consumer panics (exit status 2)
	Exits        int    `json:"exits"`        // consumers that gave up with an error (restarted)
	StoreRestart int    `json:"store_restarts"`
	BrokerRestrt int    `json:"broker_restarts"`

	Applied      int `json:"applied"`       // unique orders charged exactly once
	Doubles      int `json:"doubles"`       // charges beyond the first, over all orders
	Lost         int `json:"lost"`          // orders neither charged nor dead-lettered
	DeadLettered int `json:"dead_lettered"` // dead letters in the dead-letter stream
	// ConflictsApplied counts ids reused with other content whose both
	// contents were charged, or whose charge matches neither; ConflictsDL
	// those whose loser is dead-lettered as a conflict.
	ConflictsApplied int `json:"conflicts_applied"`
	ConflictsDL      int `json:"conflicts_dead_lettered"`
	PoisonApplied    int `json:"poison_applied"`
	PoisonDL         int `json:"poison_dead_lettered"`
	OtherDL          int `json:"other_dead_letters"` // dead letters none of the above explains
	// HandlerFailures is how many times the handler failed an order as the
	// plan injected (FailedOrders orders); FailedDL counts the orders
	// never charged and dead-lettered at their delivery limit after such
	// failures; DLWithoutFailure the dead letters of valid orders the
	// handler never failed, a failure of the verdict (what the broker's
	// limit would take from a store outage or a crash).
	HandlerFailures  int `json:"handler_failures"`
	FailedOrders     int `json:"failed_orders"`
	FailedDL         int `json:"failed_dead_lettered"`
	DLWithoutFailure int `json:"dead_lettered_without_failure"`
	Unbalanced       int `json:"unbalanced_accounts"`
	StaleInProgress  int `json:"stale_in_progress"`
	// Two-phase: bank calls (at least once per key) and charges applied
	// after the bank's own dedup by key.
	BankCalls   int `json:"bank_calls,omitempty"`
	BankApplied int `json:"bank_applied,omitempty"`

	lost     map[string]bool // the lost orders' ids
	Wall     time.Duration   `json:"-"`
	WallSecs float64         `json:"wall_seconds"`
	Problems []string        `json:"problems,omitempty"`
}

// Kills is every SIGKILL of the pass.
func (p *Pass) Kills() int { return p.PointKills + p.RandomKills }

// Restarts is every server restart of the pass.
func (p *Pass) Restarts() int { return p.StoreRestart + p.BrokerRestrt }

// Result is a chaos run: idem's pass, the naive contrast, and the verdict.
type Result struct {
	Store        string `json:"store"`
	Broker       string `json:"broker"`
	Mode         string `json:"mode"`
	Seed         uint64 `json:"seed"`
	MaxDeliver   int    `json:"max_deliver,omitempty"` // the delivery limit asked for; 0: the default
	Orders       int    `json:"orders"`
	Deliveries   int    `json:"deliveries"`
	Kills        int    `json:"kills"`
	Restarts     int    `json:"restarts"`
	Doubles      int    `json:"doubles"`
	Lost         int    `json:"lost"`
	DeadLettered int    `json:"dead_lettered"`
	// DLWithoutFailure is idem's dead letters of orders its handler never
	// failed.
	DLWithoutFailure int      `json:"dead_lettered_without_failure"`
	NaiveDoubles     int      `json:"naive_doubles"`
	VerdictOK        bool     `json:"verdict_ok"`
	WallSecs         float64  `json:"wall_seconds"`
	Idem             *Pass    `json:"idem"`
	Naive            *Pass    `json:"naive,omitempty"`
	Logs             string   `json:"logs,omitempty"` // per-process logs, kept when the verdict fails
	Problems         []string `json:"problems,omitempty"`
}

// Run runs the chaos: idem's pass, then the naive consumer's with the same
// plan and fault schedule, on the same servers.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	start := time.Now()
	env, err := startEnv(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer env.close()
	plan := NewPlan(cfg.Seed, cfg.Orders)
	if cfg.MaxDeliver == 0 {
		plan.noFailAlways()
	}
	res := &Result{Store: cfg.Store, Broker: cfg.Broker, Mode: modeOf(cfg.Store), Seed: cfg.Seed, MaxDeliver: cfg.MaxDeliver, Orders: plan.Unique()}
	idemPass, err := runPass(ctx, cfg, env, plan, false)
	if err != nil {
		return nil, err
	}
	res.Idem = idemPass
	if !cfg.SkipNaive {
		if res.Naive, err = runPass(ctx, cfg, env, plan, true); err != nil {
			return nil, err
		}
		res.NaiveDoubles = res.Naive.Doubles
		if res.Naive.Doubles == 0 {
			res.Problems = append(res.Problems, "the naive consumer found no doubles: the chaos is too weak to prove anything")
		}
	}
	res.Deliveries, res.Kills, res.Restarts = idemPass.Deliveries, idemPass.Kills(), idemPass.Restarts()
	res.Doubles, res.Lost, res.DeadLettered = idemPass.Doubles, idemPass.Lost, idemPass.DeadLettered
	res.DLWithoutFailure = idemPass.DLWithoutFailure
	res.Problems = append(idemPass.Problems, res.Problems...)
	res.VerdictOK = len(res.Problems) == 0
	res.WallSecs = time.Since(start).Seconds()
	if res.VerdictOK {
		os.RemoveAll(env.logs)
	} else {
		res.Logs = env.logs
	}
	return res, nil
}

var (
	storeNames  = map[string]string{"postgres": "PostgreSQL", "mysql": "MariaDB", "sqlite": "SQLite", "redis": "Redis"}
	brokerNames = map[string]string{"nats": "NATS JetStream", "amqp": "RabbitMQ", "kafka": "Kafka (kfake)", "redisstream": "Redis Streams", "mqtt": "MQTT (Mosquitto)",
		"sqs": "Amazon SQS (sqstest)", "pubsub": "Google Cloud Pub/Sub (pstest)", "servicebus": "Azure Service Bus (servicebustest)",
		"eventhubs": "Azure Event Hubs (eventhubstest)"}
)

// inMemory says the broker is one the harness hosts in memory, never
// restarted.
func inMemory(broker string) bool {
	return broker == "sqs" || broker == "pubsub" || broker == "servicebus" || broker == "eventhubs"
}

// brokerLimit is the delivery limit the broker is given: MaxDeliver, else
// defaultLimit.
func (c *Config) brokerLimit() int {
	if c.MaxDeliver > 0 {
		return c.MaxDeliver
	}
	return defaultLimit
}

// defaultLimit is the NATS consumer's MaxDeliver, the RabbitMQ queue's
// delivery limit and the Service Bus queue's MaxDeliveryCount without
// --max-deliver: high enough that only a failing handler reaches it.
const defaultLimit = 100

func modeOf(store string) string {
	if store == "redis" {
		return "two-phase (bank call with the derived key)"
	}
	return "transactional inbox"
}

// env is the servers and the bank one run uses.
type env struct {
	store, broker Server
	bank          *child
	bankURL       string
	logs          string
}

func startEnv(ctx context.Context, cfg Config) (e *env, err error) {
	e = &env{}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.logs, err = os.MkdirTemp("", "idem-chaos-logs-"); err != nil {
		return nil, err
	}
	switch {
	case cfg.BrokerURL != "":
		e.broker = userServer{url: cfg.BrokerURL, restart: cfg.RestartBroker}
	case cfg.Broker == "amqp":
		e.broker = userServer{url: AMQPURL()} // the machine's node: never restarted
		if err := checkAMQP(ctx, e.broker.URL()); err != nil {
			return nil, err
		}
	case cfg.Broker == "kafka":
		e.broker, err = StartKafka(ctx)
	case cfg.Broker == "redisstream":
		e.broker, err = StartRedisBroker(ctx)
	case cfg.Broker == "mqtt":
		e.broker, err = StartMosquitto(ctx)
	case cfg.Broker == "sqs":
		e.broker, err = StartSQS(ctx)
	case cfg.Broker == "pubsub":
		e.broker, err = StartPubSub(ctx)
	case cfg.Broker == "servicebus":
		e.broker, err = StartServiceBus(ctx)
	case cfg.Broker == "eventhubs":
		e.broker, err = StartEventHubs(ctx)
	default:
		e.broker, err = StartNATS(ctx)
	}
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.StoreURL != "":
		e.store = userServer{url: cfg.StoreURL, restart: cfg.RestartStore}
	case cfg.Store == "redis":
		e.store, err = StartRedis(ctx)
	case cfg.Store == "mysql":
		e.store, err = StartMariaDB(ctx)
	case cfg.Store == "sqlite":
		e.store, err = StartSQLite(ctx)
	default:
		e.store, err = StartPostgres(ctx)
	}
	if err != nil {
		return nil, err
	}
	if cfg.Store == "redis" {
		addr, err := bankAddr()
		if err != nil {
			return nil, err
		}
		e.bankURL = "http://" + addr
		e.bank, err = spawn(cfg, childConfig{Role: "bank", BankAddr: addr}, e.logs+"/bank.log")
		if err != nil {
			return nil, err
		}
		if err := waitPort(ctx, addr, 10*time.Second); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func (e *env) close() {
	if e.bank != nil {
		e.bank.kill()
		<-e.bank.done
	}
	for _, s := range []Server{e.store, e.broker} {
		if s != nil {
			s.Stop()
		}
	}
}

// IsNoServer reports whether err says a server binary is missing.
func IsNoServer(err error) bool { return errors.Is(err, ErrNoServer) }

// Table renders the result as the table `idem chaos` prints.
func (r *Result) Table() string {
	var b strings.Builder
	limit := "the harness's default"
	if r.MaxDeliver > 0 {
		limit = fmt.Sprint(r.MaxDeliver)
	}
	fmt.Fprintf(&b, "idem chaos: %s on %s + %s, seed %d, delivery limit %s\n", r.Mode, storeNames[r.Store], brokerNames[r.Broker], r.Seed, limit)
	if r.Store == "sqlite" && r.Idem != nil && r.Idem.StoreRestart == 0 {
		b.WriteString("(SQLite is a file shared by the consumer processes: no server, so no store restarts; the kills apply)\n")
	}
	if r.Broker == "amqp" && r.Idem != nil && r.Idem.BrokerRestrt == 0 {
		b.WriteString("(RabbitMQ through queues of this run only: a shared node is never restarted)\n")
	}
	if inMemory(r.Broker) {
		b.WriteString("(the broker is in-process and keeps its messages in memory: never restarted; the kills apply)\n")
	}
	b.WriteString("\n")
	passes := []*Pass{r.Idem}
	if r.Naive != nil {
		passes = append(passes, r.Naive)
	}
	fmt.Fprintf(&b, "%-26s", "")
	for _, p := range passes {
		fmt.Fprintf(&b, "%12s", p.Consumer)
	}
	b.WriteString("\n")
	row := func(name string, f func(p *Pass) int) {
		fmt.Fprintf(&b, "%-26s", name)
		for _, p := range passes {
			fmt.Fprintf(&b, "%12d", f(p))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "%-26s%12d\n", "unique orders", r.Orders)
	row("messages published", func(p *Pass) int { return p.Messages })
	row("deliveries", func(p *Pass) int { return p.Deliveries })
	row("kills at the hooks", func(p *Pass) int { return p.PointKills })
	row("kills at random", func(p *Pass) int { return p.RandomKills })
	row("store restarts", func(p *Pass) int { return p.StoreRestart })
	row("broker restarts", func(p *Pass) int { return p.BrokerRestrt })
	row("applied exactly once", func(p *Pass) int { return p.Applied })
	row("doubles", func(p *Pass) int { return p.Doubles })
	row("lost", func(p *Pass) int { return p.Lost })
	row("dead-lettered", func(p *Pass) int { return p.DeadLettered })
	row("handler failures", func(p *Pass) int { return p.HandlerFailures })
	row("failed, dead-lettered", func(p *Pass) int { return p.FailedDL })
	row("dead-lettered, not failed", func(p *Pass) int { return p.DLWithoutFailure })
	row("conflicts dead-lettered", func(p *Pass) int { return p.ConflictsDL })
	row("conflicts applied", func(p *Pass) int { return p.ConflictsApplied })
	row("poison dead-lettered", func(p *Pass) int { return p.PoisonDL })
	row("poison applied", func(p *Pass) int { return p.PoisonApplied })
	row("unbalanced accounts", func(p *Pass) int { return p.Unbalanced })
	row("stale in-progress", func(p *Pass) int { return p.StaleInProgress })
	if r.Store == "redis" {
		row("bank calls", func(p *Pass) int { return p.BankCalls })
		row("bank charges applied", func(p *Pass) int { return p.BankApplied })
	}
	fmt.Fprintf(&b, "%-26s", "wall time (s)")
	for _, p := range passes {
		fmt.Fprintf(&b, "%12.1f", p.WallSecs)
	}
	b.WriteString("\n\n")
	if r.VerdictOK {
		b.WriteString("verdict: OK, every unique order applied exactly once or, failed by the handler, dead-lettered; conflicts and poison dead-lettered; nothing lost; nothing dead-lettered that the handler never failed\n")
	} else {
		b.WriteString("verdict: FAILED\n")
		for _, p := range r.Problems {
			fmt.Fprintf(&b, "  - %s\n", p)
		}
		if r.Logs != "" {
			fmt.Fprintf(&b, "per-process logs: %s\n", r.Logs)
		}
	}
	return b.String()
}
