package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgo/idem/cmd/idem/internal/chaos"
)

// The chaos harness starts its consumers and its bank by running this
// executable again with chaos.ChildEnv set; such a process is a child, not
// the command line, and never reaches main.
func init() {
	if chaos.IsChild() {
		os.Exit(chaos.ChildMain())
	}
}

func newChaosCmd() *cobra.Command {
	var (
		cfg       chaos.Config
		store     string
		brokerArg string
		asJSON    bool
		quiet     bool
	)
	c := &cobra.Command{
		Use:   "chaos",
		Short: "Kill -9 consumers at the worst moments and restart the store and broker: effectively once, or not",
		Long: `chaos runs idem the way production breaks it. A producer publishes --orders
orders with producer retries (the same order again), ids reused with other
content, and poison (undecodable payloads, messages without a key).
--consumers consumer OS processes, written as a user writes one, charge
them:

  --store postgres  the transactional inbox: a charge row and a balance update
                    in the same PostgreSQL transaction as idem's marker;
  --store mysql     the same on MariaDB (or MySQL);
  --store sqlite    the same on one SQLite file the consumer processes share
                    (WAL); no server, so no store restarts;
  --store redis     two-phase on Redis: the charge is an HTTP call to a small
                    bank process that dedups by the key the consumer derives
                    (idem.DeriveKey).

The broker is one of:

  --broker nats     NATS JetStream (default);
  --broker amqp     RabbitMQ, through queues of this run only (a quorum work
                    queue with a delivery limit, and a dead-letter queue),
                    deleted afterwards, on IDEM_AMQP_URL (default
                    amqp://guest:guest@127.0.0.1:5672/); the node is never
                    restarted unless you pass --restart-broker for your own;
  --broker kafka    Kafka on kfake (franz-go's Kafka in Go), hosted by the
                    harness on a loopback port; a consumer group spreads the
                    partitions over the consumers;
  --broker redisstream
                    Redis Streams on a redis-server of the harness's own
                    (apart from the store's), with an append-only file synced
                    on every write: a work stream read by a consumer group
                    (XREADGROUP, XAUTOCLAIM of a killed consumer's entries,
                    XACK after the commit) and a dead-letter stream;
  --broker mqtt     MQTT v5 on a mosquitto of the harness's own, persisting
                    to its directory: a shared subscription of persistent
                    sessions, one per consumer slot (a restarted consumer
                    resumes its predecessor's unacked messages), PUBACK after
                    the commit, and a dead-letter topic;
  --broker sqs      Amazon SQS on sqstest, hosted by the harness on a
                    loopback port and reached over HTTP with the real
                    aws-sdk-go-v2 client: a standard queue the consumers
                    share (a killed consumer's messages come back when their
                    visibility timeout ends), DeleteMessage after the commit,
                    and a dead-letter queue; in memory, so never restarted;
  --broker pubsub   Google Cloud Pub/Sub on pstest, hosted by the harness and
                    reached over gRPC with the real client's streaming pull:
                    one subscription the consumers share (a killed consumer's
                    messages come back when its ack deadline ends), the ack
                    after the commit, and a dead-letter topic; in memory, so
                    never restarted;
  --broker servicebus
                    Azure Service Bus on servicebustest, hosted by the harness
                    on a loopback port and reached by its connection string
                    with the real azservicebus client: a queue the consumers
                    share in PeekLock (a killed consumer's messages come back
                    when their lock ends), the complete after the commit, the
                    queue's MaxDeliveryCount the delivery limit (the
                    consumers' MaxDeliveries to match), and its
                    $DeadLetterQueue; in memory, so never restarted;
  --broker eventhubs
                    Azure Event Hubs on eventhubstest, hosted by the harness
                    on a loopback port and reached by its connection string
                    with the real azeventhubs client: a hub of 4 partitions,
                    an azeventhubs.Processor in every consumer balancing them
                    through broker/eventhubs/checkpointstore on the run's
                    PostgreSQL (so --store postgres only), the checkpoint
                    after each batch (a consumer killed between an event's
                    commit and its batch's checkpoint leaves the batch to be
                    read again), the key the Idem-Id property alone, and a
                    dead-letter hub; in memory, so never restarted.

The brokers are those of idem dlq's table of drivers (idem dlq --help).
` + watermillNote + `

A supervisor SIGKILLs consumers at random, and makes them SIGKILL themselves
at chosen points through the library's hooks: after the commit (or Complete)
and before the ack (broker.Hooks.BeforeSettle), and after the side effect
and before the commit or Complete (in the handler). It restarts them, and it
restarts the store (PostgreSQL: pg_ctl stop -m immediate; MariaDB and Redis
(appendfsync always): SIGKILL) and the broker (nats-server: SIGTERM; kfake:
closed and opened again on its data directory; redis-server: SIGKILL;
mosquitto: SIGTERM, as its restarts are clean: Mosquitto persists on
shutdown and every 1-2 s, so a SIGKILL would lose what it acked since) mid-run.

By default the servers are the harness's own, on private ports and
directories (initdb and pg_ctl as the postgres user when run as root,
mariadb-install-db and mariadbd, nats-server, redis-server, mosquitto, found on the
PATH and under /usr/lib/postgresql/*/bin and /usr/sbin), removed afterwards.
--store URL and --broker URL point it at yours instead (postgres://,
mysql:// or mariadb://, sqlite://, redis://; nats://, amqp://, redis:// for
Redis Streams, mqtt://): it creates idem_chaos_* tables, CHAOS_* streams, idem-chaos-*
queues, idem-chaos:* stream keys and idem-chaos-* topics and sessions there;
--restart-store and --restart-broker are the shell commands that restart
them (without one, that server is not restarted).

The verdict comes from the effects only (the charge rows and balances, the
bank's ledger, the dead letters), never from idem's counters: every unique
order charged exactly once, every balance the sum of its charges, conflicts
and poison dead-lettered with their reasons and not charged, nothing lost,
no in-progress record left past its lease. The same run with a naive
consumer (charge, commit, ack; no idem) must find doubles, or the chaos
proves nothing. --seed replays the plan and the fault schedule. The exit
status is 0 only when the verdict holds; otherwise the per-process logs are
kept and named.

--max-deliver N sets the broker's delivery limit, as an operator would:
on NATS the durable consumer's MaxDeliver (idem's MaxDeliveries follows
it), on RabbitMQ the quorum queue's x-delivery-limit, with the consumer's
MaxDeliveries set to match and the queue dead-lettering what it drops to
the dead-letter queue, on Service Bus the queue's MaxDeliveryCount, with
the consumer's MaxDeliveries set to match, and on Kafka, Redis Streams,
MQTT, SQS, Pub/Sub (their queue and subscription without a redrive or
dead-letter policy) and Event Hubs, the consumer's MaxDeliveries only. Without it the
limit is 100 on NATS, RabbitMQ and Service Bus and there is none on the
others. The handler fails about 1% of the
orders twice before it charges them, and with --max-deliver 0.3% every
time: those must end dead-lettered (max_deliver). The verdict counts as
failures a dead letter of an order the handler never failed (its
deliveries spent by store outages or crashes) and an order neither charged
nor dead-lettered (lost).

Deliveries are the broker's count on NATS (the durable consumer's), and the
consumer processes' own count on RabbitMQ (the highest delivery tag of each
channel), Kafka (the records their clients handed them), Redis Streams
(the entries XREADGROUP and XAUTOCLAIM handed them), MQTT (the PUBLISHes
their sessions received), SQS (the messages their receives returned) and
Pub/Sub, Service Bus and Event Hubs (the deliveries their consumers
settled; on Event Hubs the naive consumer's, the events its receives
returned).`,
		Example: `  idem chaos
  idem chaos --store redis --orders 20000 --consumers 4 --seed 7
  idem chaos --store mysql --broker amqp
  idem chaos --store sqlite --broker kafka
  idem chaos --store sqlite --broker redisstream
  idem chaos --store sqlite --broker mqtt
  idem chaos --store sqlite --broker sqs
  idem chaos --store postgres --broker pubsub
  idem chaos --store sqlite --broker servicebus
  idem chaos --store postgres --broker eventhubs --max-deliver 4
  idem chaos --orders 12000 --consumers 4 --max-deliver 4 --store-restarts 3
  idem chaos --json --quiet
  idem chaos --store postgres://postgres@127.0.0.1:5432/app --broker nats://127.0.0.1:4222 \
      --restart-store 'pg_ctlcluster 15 main restart -m immediate'`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if err := chaosStore(&cfg, store); err != nil {
				return err
			}
			if err := chaosBroker(&cfg, brokerArg); err != nil {
				return err
			}
			if cfg.Broker == "eventhubs" && cfg.Store != "postgres" {
				return usagef("--broker eventhubs: the consumers' Processors keep their ownership and checkpoints in broker/eventhubs/checkpointstore, on PostgreSQL: --store postgres")
			}
			if cfg.Orders < 1 || cfg.Consumers < 1 || cfg.Concurrency < 1 {
				return usagef("--orders, --consumers and --concurrency must be at least 1")
			}
			if cfg.MaxDeliver < 0 || cfg.MaxDeliver == 0 && c.Flags().Changed("max-deliver") {
				return usagef("--max-deliver must be at least 1")
			}
			// The harness reads 0 as its default and a negative count as none.
			for name, n := range map[string]*int{"kills": &cfg.RandomKills, "store-restarts": &cfg.StoreRestarts, "broker-restarts": &cfg.BrokerRestarts} {
				switch {
				case *n < 0:
					return usagef("--%s cannot be negative", name)
				case *n == 0 && c.Flags().Changed(name):
					*n = -1
				}
			}
			if !quiet {
				cfg.Progress = c.ErrOrStderr()
			}
			res, err := chaos.Run(c.Context(), cfg)
			if err != nil {
				return err
			}
			if asJSON {
				if err := writeJSON(c.OutOrStdout(), res); err != nil {
					return err
				}
			} else {
				io.WriteString(c.OutOrStdout(), res.Table())
			}
			if !res.VerdictOK {
				if asJSON && res.Logs != "" {
					fmt.Fprintf(c.ErrOrStderr(), "idem chaos: verdict failed; per-process logs in %s\n", res.Logs)
				}
				return silentError{exitFailure}
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&store, "store", "postgres", "postgres, mysql, sqlite or redis: a private server (a file for sqlite); or your postgres://, mysql://, sqlite:// or redis:// URL")
	f.StringVar(&brokerArg, "broker", "nats", "nats (a private nats-server), amqp (RabbitMQ at IDEM_AMQP_URL, own queues), kafka (kfake), redisstream (a private redis-server), mqtt (a private mosquitto), sqs (sqstest), pubsub (pstest), servicebus (servicebustest) or eventhubs (eventhubstest, with --store postgres); or your nats://, amqp://, redis:// or mqtt:// URL")
	f.StringVar(&cfg.RestartStore, "restart-store", "", "shell command that restarts your store mid-run")
	f.StringVar(&cfg.RestartBroker, "restart-broker", "", "shell command that restarts your broker mid-run")
	f.IntVar(&cfg.Orders, "orders", 3000, "unique orders to publish")
	f.IntVar(&cfg.Consumers, "consumers", 3, "consumer processes")
	f.IntVar(&cfg.Concurrency, "concurrency", 4, "handlers per consumer process")
	f.Uint64Var(&cfg.Seed, "seed", 1, "seed of the orders and of the fault schedule")
	f.IntVar(&cfg.MaxDeliver, "max-deliver", 0, "the broker's delivery limit: NATS MaxDeliver, RabbitMQ x-delivery-limit and Service Bus MaxDeliveryCount (MaxDeliveries to match), the others' MaxDeliveries only (no broker limit); default 100 on NATS, RabbitMQ and Service Bus, none on the others")
	f.IntVar(&cfg.RandomKills, "kills", 0, "SIGKILLs at random moments (default orders/300, at least 3)")
	f.IntVar(&cfg.StoreRestarts, "store-restarts", 0, "store restarts (default 2)")
	f.IntVar(&cfg.BrokerRestarts, "broker-restarts", 0, "broker restarts (default 1)")
	f.BoolVar(&cfg.NoPointKills, "no-hook-kills", false, "arm no kills at the hooks")
	f.BoolVar(&cfg.SkipNaive, "no-naive", false, "skip the naive consumer's run")
	f.DurationVar(&cfg.Settle, "settle", 2*time.Minute, "how long to wait for the last messages once the producer is done")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	f.BoolVar(&quiet, "quiet", false, "no progress lines")
	return c
}

// chaosStore reads --store: a kind (a private server) or a URL (the
// user's server, whose scheme names the kind).
func chaosStore(cfg *chaos.Config, store string) error {
	kind, _, isURL := strings.Cut(store, "://")
	switch kind {
	case "postgres", "postgresql":
		cfg.Store = "postgres"
	case "mysql", "mariadb":
		cfg.Store = "mysql"
	case "sqlite", "redis":
		cfg.Store = kind
	default:
		return usagef("--store %q: postgres, mysql, sqlite or redis, or a postgres://, mysql://, sqlite:// or redis:// URL", store)
	}
	if isURL {
		cfg.StoreURL = store
	}
	return nil
}
