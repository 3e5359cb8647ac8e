package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	ehidem "github.com/idemgo/idem/broker/eventhubs"
	"github.com/idemgo/idem/broker/eventhubs/checkpointstore"
	"github.com/idemgo/idem/broker/eventhubs/eventhubstest"
	"github.com/idemgo/idem/cmd/idem/internal/dlq"
	"github.com/idemgo/idem/store/postgres"
)

// Azure Event Hubs: the broker is eventhubstest, an in-process Event Hubs
// the harness hosts on a loopback port, which the consumer processes
// reach by its connection string with the real, unmodified azeventhubs
// client (AMQP 1.0), as they would reach Azure. It keeps its events in
// memory, so it is never restarted. Each pass has a hub of ehPartitions
// partitions, read by an azeventhubs.Processor in every consumer process:
// the Processors balance the partitions through a CheckpointStore on the
// run's PostgreSQL (broker/eventhubs/checkpointstore, in tables of the
// run), and each checkpoints after every batch, so a consumer killed
// between an event's effect and its batch's checkpoint leaves the batch to
// be read again by whoever owns the partition next. Event Hubs has no
// delivery limit: the consumers' MaxDeliveries is the only one; dead
// letters go to a dead-letter hub.

// ehPartitions is how many partitions the work hub has: the Processors
// spread them over the consumers.
const ehPartitions = 4

// The Processors' timings: a killed consumer's partitions expire, and
// the others claim them, within a few seconds.
const (
	ehUpdateInterval = 300 * time.Millisecond
	ehExpiration     = 3 * time.Second
)

// ehTables are the checkpoint store's tables of the run.
var ehTables = checkpointstore.Options{OwnershipTable: "idem_chaos_eh_ownership", CheckpointTable: "idem_chaos_eh_checkpoints"}

// StartEventHubs starts the harness's in-process Event Hubs; its URL is
// the namespace's connection string, what the consumer processes connect
// with.
func StartEventHubs(context.Context) (Server, error) {
	srv, err := eventhubstest.NewServer()
	if err != nil {
		return nil, fmt.Errorf("chaos: eventhubstest: %w", err)
	}
	return &memServer[*eventhubstest.Server]{srv: srv, name: "eventhubstest", url: srv.ConnectionString(), close: srv.Close}, nil
}

type ehBus struct {
	srv              *eventhubstest.Server
	conn             string
	pool             *pgxpool.Pool // the run's PostgreSQL: the checkpoints
	hub, dlq, counts string
	maxDeliveries    int // the consumers' MaxDeliveries (0: retry forever)
	checkpointsByHub string
	partitionIDs     []string
}

func openEventHubs(ctx context.Context, e *env, maxDeliveries int, naive bool) (bus, error) {
	srv, ok := e.broker.(*memServer[*eventhubstest.Server])
	if !ok {
		return nil, errors.New("chaos: Event Hubs runs on the harness's own eventhubstest only")
	}
	b := &ehBus{srv: srv.srv, conn: srv.URL(), hub: "chaos-orders", dlq: "chaos-dlq", maxDeliveries: maxDeliveries}
	if naive {
		b.hub, b.dlq = "chaos-naive-orders", "chaos-naive-dlq"
	}
	if err := b.srv.CreateHub(b.hub, eventhubstest.HubOptions{Partitions: ehPartitions}); err != nil {
		return nil, fmt.Errorf("chaos: eventhubstest: create hub %s: %w", b.hub, err)
	}
	if err := b.srv.CreateHub(b.dlq, eventhubstest.HubOptions{Partitions: 1}); err != nil {
		return nil, fmt.Errorf("chaos: eventhubstest: create hub %s: %w", b.dlq, err)
	}
	for i := range ehPartitions {
		b.partitionIDs = append(b.partitionIDs, fmt.Sprint(i))
	}
	var err error
	if b.counts, err = os.MkdirTemp(e.logs, "counts-"); err != nil {
		return nil, err
	}
	if b.pool, err = pgxpool.New(ctx, e.store.URL()); err != nil {
		return nil, err
	}
	// The checkpoint store's tables, afresh: a pass starts every
	// partition at its earliest event.
	for _, t := range []string{ehTables.OwnershipTable, ehTables.CheckpointTable} {
		if _, err := b.pool.Exec(ctx, "drop table if exists "+t); err != nil {
			b.close()
			return nil, fmt.Errorf("chaos: drop %s: %w", t, err)
		}
	}
	cps, err := ehCheckpointStore(b.pool)
	if err == nil {
		err = cps.Migrate(ctx)
	}
	if err != nil {
		b.close()
		return nil, err
	}
	b.checkpointsByHub = `select coalesce(sum(sequence_number + 1), 0) from ` + ehTables.CheckpointTable + ` where event_hub = $1`
	return b, nil
}

// ehCheckpointStore is the Processors' CheckpointStore on pool.
func ehCheckpointStore(pool *pgxpool.Pool) (*checkpointstore.Store, error) {
	st, err := postgres.New(pool, postgres.Options{})
	if err != nil {
		return nil, err
	}
	return checkpointstore.New(st, ehTables)
}

func (b *ehBus) names(cc *childConfig) {
	cc.Source, cc.DLQ, cc.Counts, cc.MaxDeliveries = b.hub, b.dlq, b.counts, b.maxDeliveries
}

func (b *ehBus) close() {
	if b.pool != nil {
		b.pool.Close()
	}
}

// progress: the checkpoints (each the last event done, so +1 is how many
// of its partition are) against the events the hub holds; not ok while
// PostgreSQL is away.
func (b *ehBus) progress(ctx context.Context) (int64, bool, bool) {
	var held int64
	for _, id := range b.partitionIDs {
		n, err := b.srv.Count(b.hub, id)
		if err != nil {
			return 0, false, false
		}
		held += int64(n)
	}
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var done int64
	if err := b.pool.QueryRow(qctx, b.checkpointsByHub, b.hub).Scan(&done); err != nil {
		return 0, false, false
	}
	return done, held > 0 && done == held, true
}

func (b *ehBus) deliveries(context.Context) int { return deliveryCounts(b.counts) }

// produce sends each message with ehidem.Send (its order id the
// MessageID, copied into Idem-Id; the account the partition key), and
// one without a key plainly, with no MessageID (the SDK gives it a random
// one, which the consumers' key function does not read). A send that
// fails is sent again: an event whose acknowledgement was what was lost
// is in the hub twice.
func (b *ehBus) produce(ctx context.Context, plan *Plan, settled *atomic.Int64) error {
	p, err := azeventhubs.NewProducerClientFromConnectionString(b.conn, b.hub, nil)
	if err != nil {
		return err
	}
	defer p.Close(context.Background())
	ct := "application/json"
	return produceBatches(ctx, plan, settled, 100, func(todo []planned) []planned {
		var again []planned
		for _, m := range todo {
			ev := &azeventhubs.EventData{Body: m.Data, ContentType: &ct}
			opts := &azeventhubs.EventDataBatchOptions{PartitionKey: &m.Order.Account}
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if m.ID == "" {
				err = ehSendPlain(sctx, p, opts, ev)
			} else {
				id := m.ID
				ev.MessageID = &id
				err = ehidem.Send(sctx, p, opts, ev)
			}
			cancel()
			if err != nil {
				again = append(again, m)
			}
		}
		return again
	})
}

// ehSendPlain sends one event as the SDK does without idem.
func ehSendPlain(ctx context.Context, p *azeventhubs.ProducerClient, opts *azeventhubs.EventDataBatchOptions, ev *azeventhubs.EventData) error {
	batch, err := p.NewEventDataBatch(ctx, opts)
	if err != nil {
		return err
	}
	if err := batch.AddEventData(ev, nil); err != nil {
		return err
	}
	return p.SendEventDataBatch(ctx, batch, nil)
}

// deadLetters reads the dead-letter hub whole with idem dlq's reader.
func (b *ehBus) deadLetters(ctx context.Context) ([]deadLetter, error) {
	q, err := dlq.OpenEventHubs(ctx, nil, dlq.EventHubsPrefix+b.conn+";EntityPath="+b.dlq)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	dls, err := q.List(ctx, 0)
	if err != nil {
		return nil, fmt.Errorf("chaos: read the dead letters: %w", err)
	}
	out := make([]deadLetter, len(dls))
	for i, d := range dls {
		out[i] = newDeadLetter(d.Headers[ehidem.HeaderID], d.Reason, d.Body)
	}
	return out, nil
}

// ehProcessor is a consumer process's Processor of hub, on the run's
// checkpoint store, starting a partition without a checkpoint at its
// earliest event.
func ehProcessor(cfg childConfig, pool *pgxpool.Pool) (*azeventhubs.Processor, *azeventhubs.ConsumerClient, error) {
	cps, err := ehCheckpointStore(pool)
	if err != nil {
		return nil, nil, err
	}
	cc, err := azeventhubs.NewConsumerClientFromConnectionString(cfg.BrokerURL, cfg.Source, azeventhubs.DefaultConsumerGroup, nil)
	if err != nil {
		return nil, nil, err
	}
	yes := true
	p, err := azeventhubs.NewProcessor(cc, cps, &azeventhubs.ProcessorOptions{
		StartPositions: azeventhubs.StartPositions{Default: azeventhubs.StartPosition{Earliest: &yes}},
		UpdateInterval: ehUpdateInterval, PartitionExpirationDuration: ehExpiration,
	})
	if err != nil {
		cc.Close(context.Background())
		return nil, nil, err
	}
	return p, cc, nil
}

// runEventHubs is an Event Hubs consumer process, run by the eventhubs
// package's consumer on a Processor: each owned partition in order, the
// checkpoint after each batch, dead letters to the dead-letter hub. The
// key is the Idem-Id property alone (idem.HeaderKey), as Send sets it:
// the SDK gives an event sent without a MessageID a random one, which
// would make a keyless event a new key on every re-send.
func runEventHubs(ctx context.Context, cfg childConfig, l *ledger) error {
	if l.pool == nil {
		return errors.New("chaos: Event Hubs keeps its checkpoints on PostgreSQL: --store postgres")
	}
	p, cc, err := ehProcessor(cfg, l.pool)
	if err != nil {
		return err
	}
	defer cc.Close(context.Background())
	count := newCounter(cfg.Counts)
	if cfg.Naive {
		return runNaiveEventHubs(ctx, p, count, l)
	}
	logf("started")
	dead, err := azeventhubs.NewProducerClientFromConnectionString(cfg.BrokerURL, cfg.DLQ, nil)
	if err != nil {
		return err
	}
	defer dead.Close(context.Background())
	opts := l.options()
	opts.Key = idem.HeaderKey(ehidem.HeaderID)
	g, err := ehidem.NewGuard(l.store, cfg.Source, azeventhubs.DefaultConsumerGroup, opts)
	if err != nil {
		return err
	}
	body := func(ev *azeventhubs.ReceivedEventData) []byte { return ev.Body }
	h := handlerFor(l, body, ehidem.Handle, ehidem.HandleTx[pgx.Tx], ehidem.HandleTx[*sql.Tx])
	c, err := ehidem.NewConsumer(p, g, h, ehidem.Options{
		Concurrency: cfg.Concurrency, MaxDeliveries: cfg.MaxDeliveries,
		Backoff: engineBackoff, ShutdownTimeout: engineShutdown, Hooks: countSettled(engineHooks[*azeventhubs.ReceivedEventData](l), count),
		DeadLetter: dead, EventHub: cfg.Source, ReceiveWait: 200 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// runNaiveEventHubs: a plain Processor loop, each owned partition in its
// goroutine: receive a batch, charge each event (a failed charge tried
// again after a pause, an undecodable one skipped), checkpoint the batch.
func runNaiveEventHubs(ctx context.Context, p *azeventhubs.Processor, count *counter, l *ledger) error {
	go func() {
		for {
			pc := p.NextPartitionClient(ctx)
			if pc == nil {
				return
			}
			go func() {
				defer pc.Close(context.Background())
				for ctx.Err() == nil {
					rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
					evs, err := pc.ReceiveEvents(rctx, 100, nil)
					cancel()
					var ehErr *azeventhubs.Error
					if errors.As(err, &ehErr) && ehErr.Code == azeventhubs.ErrorCodeOwnershipLost {
						return
					}
					count.add(uint64(len(evs)))
					for _, ev := range evs {
						for {
							err := l.naive(ctx, ev.Body)
							if err == nil {
								l.kill.pass(pointSettle)
							}
							if err == nil || errors.Is(err, errPoison) || ctx.Err() != nil {
								break
							}
							time.Sleep(200 * time.Millisecond)
						}
					}
					if len(evs) > 0 {
						pc.UpdateCheckpoint(ctx, evs[len(evs)-1], nil)
					}
				}
			}()
		}
	}()
	return p.Run(ctx)
}
