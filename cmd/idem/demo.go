package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemgo/idem/cmd/idem/internal/demo"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
)

func newDemoCmd() *cobra.Command {
	var (
		cfg         demo.Config
		asJSON      bool
		quiet       bool
		metricsAddr string
	)
	c := &cobra.Command{
		Use:   "demo",
		Short: "Watch at-least-once delivery double-charge a naive consumer, and idem charge exactly once",
		Long: `demo runs a small payment system with nothing to install: an embedded NATS
JetStream broker and an embedded store, both in temporary directories that
are removed afterwards.

A producer publishes orders (order id, account, amount); some are sent again
(producer retries with the same id) and a few reuse an id with other content.
Competing consumers charge each order to an account ledger through idem: in
the same SQL transaction as idem's inbox marker where the store allows it,
two-phase otherwise. Chaos, drawn from --seed, crashes consumers after their
commit and before their ack, loses acks and fails handlers; crashed consumers
restart. A naive consumer without dedup reads the same stream under the same
chaos.

The report compares them and checks the exactly-once invariant: idem charged
every order exactly once, every account balance is right, every reused id was
dead-lettered as a conflict, no order was lost. The exit status is 0 only when
it holds; otherwise the offending orders are listed.

--broker servicebus runs it on an in-process Azure Service Bus (the real
azservicebus client against broker/servicebus/servicebustest): a topic with
duplicate detection and a short lock, the producer on servicebus.Send (so the
broker drops producer retries, but never a reused id with other content),
idem's consumers on servicebus.NewConsumer in PeekLock; a crash closes the
consumer's client, and its locked message comes back when the lock runs out.
With --producer outbox the orders go through a transactional outbox instead
(outbox/sqlite in a temporary directory, one transaction per send, a
producer retry kept once by it) and its relay publishes them with
outbox/servicebus. --store cosmos runs it on an in-process Azure Cosmos DB
for NoSQL (the real azcosmos client against store/cosmos/cosmostest, records
two-phase): with --broker servicebus, the seed's own pair.

--broker sqs runs it on an in-process Amazon SQS (broker/sqs/sqstest, the
real aws-sdk-go-v2 client): a standard queue per consumer group with a
visibility timeout of a second, the producer on sqsidem.Send; a crashed
consumer's messages come back when their visibility timeout ends.
--broker pubsub runs it on an in-process Google Cloud Pub/Sub (pstest, the
real client over gRPC): a subscription per consumer group, consumers
pulling with an ack deadline of a second, the producer on
pubsubidem.Publish. --broker kafka runs it on an in-process Kafka (kfake,
franz-go's Kafka in Go, the real kgo client): a topic of orders keyed by
order id whose partitions a consumer group per side shares, idem's
consumers on kafka.NewConsumer, the producer on kafka.Publish (Kafka drops
no producer retry), the naive ones plain kgo members committing what they
charged; a crash cuts the consumer's connections, so its offsets are never
committed and its partitions move to the others when its session (a
second) runs out, from the last committed offset, and dead letters go to a
topic. --broker eventhubs runs it on an in-process Azure Event Hubs (the
real azeventhubs client against broker/eventhubs/eventhubstest): a hub of
orders keyed by order id read by a consumer group per side, each consumer
process an azeventhubs.Processor on a client of its own, the processes
sharing the partitions through a checkpoint store in memory; idem's
consumers on eventhubs.NewConsumer (each partition in order, checkpointed
after each batch), the producer on eventhubs.Send (Event Hubs drops no
producer retry), the naive ones plain Processor loops checkpointing each
event they charged. Event Hubs has no per-event settle: a crash closes the
consumer's client before its batch's checkpoint, and its partitions go to
the others when its ownership expires (a second), from the last
checkpoint; dead letters go to a hub. --broker redis://HOST:PORT runs it on
Redis Streams on your Redis: a stream of the run read by a consumer group
per side, a crashed consumer's entries claimed (XAUTOCLAIM) once idle a
second, and a dead-letter stream, both deleted afterwards. --broker
mqtt://HOST:PORT runs it on your MQTT v5 broker: a topic of the run with a
shared subscription per side whose members are persistent sessions, one per
consumer slot (a crashed consumer's unacked messages go to the next consumer
that takes its slot), retries held in the consumer (MQTT has no nack), and a
dead-letter topic; the sessions are discarded afterwards. The brokers come
from the table idem dlq uses (idem dlq --help). Watermill runs over another
broker's Pub/Sub: run the demo on that broker.`,
		Example: `  idem demo
  idem demo --consumers 8 --crash-rate 0.2 --dup-rate 0.5 --seed 42
  idem demo --messages 500 --json
  idem demo --broker servicebus --json
  idem demo --broker servicebus --producer outbox
  idem demo --broker servicebus --store cosmos
  idem demo --broker sqs --messages 500
  idem demo --broker pubsub --json
  idem demo --broker kafka --messages 500
  idem demo --broker eventhubs --messages 500
  idem demo --broker redis://127.0.0.1:6379 --store sqlite://demo.db
  idem demo --broker mqtt://127.0.0.1:1883
  idem demo --store sqlite://demo.db --broker nats://127.0.0.1:4222
  idem demo --store postgres://localhost/app --broker amqp://guest:guest@localhost:5672/`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if err := checkDemoFlags(c, &cfg); err != nil {
				return err
			}
			if !asJSON && !quiet && isTerminal(c.ErrOrStderr()) {
				cfg.Progress = c.ErrOrStderr()
			}
			if metricsAddr != "" {
				m, err := serveMetrics(metricsAddr)
				if err != nil {
					return err
				}
				defer m.Close()
				m.announce(c.ErrOrStderr())
				cfg.Observer = m.Observer()
			}
			rep, err := demo.Run(c.Context(), cfg)
			if err != nil {
				if errors.Is(err, demo.ErrConfig) || errors.Is(err, dsn.ErrBadDSN) || errors.Is(err, dsn.ErrUnknownScheme) {
					return usageError{err}
				}
				return err
			}
			if asJSON {
				if err := writeJSON(c.OutOrStdout(), rep); err != nil {
					return err
				}
			} else if err := rep.WriteTable(c.OutOrStdout()); err != nil {
				return err
			}
			if !rep.InvariantOK {
				if asJSON {
					fmt.Fprintf(c.ErrOrStderr(), "idem: exactly-once invariant broken:\n  %s\n", strings.Join(rep.Offending, "\n  "))
				}
				return silentError{exitFailure}
			}
			return nil
		},
	}
	c.Long = withDSNForms(c.Long)
	fl := c.Flags()
	fl.IntVar(&cfg.Orders, "messages", demo.DefaultOrders, "distinct orders the producer publishes (retries and conflicts come on top)")
	fl.IntVar(&cfg.Consumers, "consumers", demo.DefaultConsumers, "competing consumers (idem's, and as many naive ones)")
	fl.Float64Var(&cfg.DupRate, "dup-rate", demo.DefaultDupRate, "share of orders the producer sends again (0-1)")
	fl.Float64Var(&cfg.ConflictRate, "conflict-rate", demo.DefaultConflictRate, "share of order ids reused with other content (at least one unless 0)")
	fl.Float64Var(&cfg.CrashRate, "crash-rate", demo.DefaultCrashRate, "per delivery: chance of a crash between commit and ack; lost acks and failed handlers come half as often each (0-0.45)")
	fl.Uint64Var(&cfg.Seed, "seed", 0, "seed of the orders and the faults (0: random; the report shows it)")
	fl.StringVar(&cfg.Store, "store", "", "store DSN (default: embedded, temporary): "+dsnHelp+", or cosmos for an in-process Azure Cosmos DB; every form is listed above")
	fl.StringVar(&cfg.Broker, "broker", "", "broker (default: embedded NATS): nats://HOST:PORT, amqp://USER:PASS@HOST:PORT/, redis://HOST:PORT (Redis Streams), mqtt://HOST:PORT, sqs for an in-process Amazon SQS, pubsub for an in-process Google Cloud Pub/Sub, kafka for an in-process Kafka, eventhubs for an in-process Azure Event Hubs, or servicebus for an in-process Azure Service Bus")
	fl.StringVar(&cfg.Producer, "producer", demo.ProducerDirect, "direct (publish each order to the broker) or outbox (enqueue it in a transactional outbox whose relay publishes it; --broker servicebus)")
	fl.StringVar(&cfg.Mode, "mode", "auto", "auto, tx (charge in the inbox transaction) or two-phase")
	fl.DurationVar(&cfg.Deadline, "timeout", demo.DefaultDeadline, "give up after this long")
	fl.BoolVar(&asJSON, "json", false, "print the report as one JSON object")
	fl.BoolVar(&quiet, "quiet", false, "no live progress line")
	fl.StringVar(&metricsAddr, "metrics-addr", "", "serve idem's Prometheus metrics at http://ADDR/metrics while the demo runs (e.g. 127.0.0.1:9464)")
	return c
}

// checkDemoFlags turns the flags' zero values into explicit "none" (the
// library's zero means "default") and rejects what the demo cannot run.
func checkDemoFlags(c *cobra.Command, cfg *demo.Config) error {
	for _, r := range []struct {
		name string
		v    *float64
		max  float64
	}{{"dup-rate", &cfg.DupRate, 1}, {"conflict-rate", &cfg.ConflictRate, 0.5}, {"crash-rate", &cfg.CrashRate, 0.45}} {
		if *r.v < 0 || *r.v > r.max {
			return usagef("--%s %g: want a value between 0 and %g", r.name, *r.v, r.max)
		}
		if *r.v == 0 {
			*r.v = -1
		}
	}
	if cfg.Orders < 1 {
		return usagef("--messages must be at least 1")
	}
	if cfg.Consumers < 1 {
		return usagef("--consumers must be at least 1")
	}
	on, url, err := demoBroker(cfg.Broker)
	if err != nil {
		return err
	}
	cfg.On, cfg.Broker = on, url
	return nil
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
