package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// ChildEnv names the environment variable that makes a process one of the
// harness's children (a consumer or the bank): it holds the child's
// configuration as JSON. The harness starts children by running its own
// executable again with it set; the program's main (or a TestMain) calls
// ChildMain first.
const ChildEnv = "IDEM_CHAOS_CHILD"

// Kill points armed in a consumer.
const (
	pointSettle = "settle" // in broker.Hooks.BeforeSettle: after the commit (or Complete), before the ack
	pointEffect = "effect" // after the side effect (the bank call, the charge writes), before Complete or commit
)

// childConfig is what a child reads from ChildEnv.
type childConfig struct {
	Role      string // "consumer" or "bank"
	Store     string // "postgres", "mysql", "sqlite", "redis"
	Broker    string // "nats", "amqp", "kafka", "redisstream", "mqtt", "sqs", "pubsub", "servicebus", "eventhubs"
	Naive     bool   // no idem: charge, commit, ack
	StoreURL  string
	BrokerURL string
	// Source is what the consumers read: the JetStream stream, the AMQP
	// queue, the Kafka topic, the Redis stream or the MQTT topic; Durable
	// the JetStream durable, the Kafka or Redis group or the MQTT sessions'
	// prefix; DLQ the dead-letter subject, queue, topic or stream.
	Source, Durable, DLQ string
	// Counts is a directory where each consumer process counts the
	// deliveries it received, in a file of its own (brokers that count no
	// deliveries the harness can read: RabbitMQ, Kafka); "": none.
	Counts string
	// Fails is a directory holding the injected handler failures: the
	// plan's Fails in failPlanFile, and a file per failure the handler
	// returned ("": none injected, the naive consumer).
	Fails string
	// MaxDeliveries is the consumer's MaxDeliveries (RabbitMQ: the
	// queue's delivery-limit; Kafka: the only limit; NATS: 0, the
	// consumer's MaxDeliver).
	MaxDeliveries int
	Tables        tables
	BankURL       string
	BankAddr      string // the bank's listen address
	KillAt        string // pointSettle, pointEffect or ""
	KillAfter     int    // SIGKILL at the KillAfter-th time the point is passed
	Concurrency   int
	Slot          int // the consumer's slot: MQTT names its persistent session by it
	Lease         time.Duration
	Prefix        string // the Redis store's key prefix, fresh per run
}

// tables names one run's business tables (the SQL stores).
type tables struct{ Charges, Balances, Records string }

// IsChild reports whether this process was started as a harness child.
func IsChild() bool { return os.Getenv(ChildEnv) != "" }

// ChildMain runs the child described by ChildEnv until it is killed or
// its broker connection is lost for good, and returns its exit status.
func ChildMain() int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(os.Getenv(ChildEnv)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "idem chaos child: bad %s: %v\n", ChildEnv, err)
		return 2
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var err error
	switch cfg.Role {
	case "bank":
		err = runBank(ctx, cfg.BankAddr)
	case "consumer":
		err = runConsumer(ctx, cfg)
	default:
		err = fmt.Errorf("unknown role %q", cfg.Role)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "idem chaos %s: %v\n", cfg.Role, err)
		return 1
	}
	return 0
}

// killer SIGKILLs its own process the n-th time a point is passed: the
// crash at the worst moment, taken through the library's hooks and the
// user's handler, never through a modified idem.
type killer struct {
	point string
	left  chan struct{} // one token per pass before the kill
}

func newKiller(point string, after int) *killer {
	if point == "" || after <= 0 {
		return &killer{}
	}
	k := &killer{point: point, left: make(chan struct{}, after)}
	for range after - 1 {
		k.left <- struct{}{}
	}
	return k
}

// pass is called at point; the after-th call never returns.
func (k *killer) pass(point string) {
	if k.point != point {
		return
	}
	select {
	case <-k.left:
	default:
		fmt.Fprintf(os.Stderr, "idem chaos consumer %d: SIGKILL at %s\n", os.Getpid(), point)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
