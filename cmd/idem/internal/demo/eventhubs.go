package demo

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"
	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/eventhubs"
	"github.com/idemgo/idem/broker/eventhubs/eventhubstest"
)

// EventHubs is an in-process Azure Event Hubs (eventhubstest) through the
// real azeventhubs (v2) client: a hub of orders keyed by order id (an
// order's retries and reuses follow it in its partition), read by a
// consumer group per side, whose consumer processes are each an
// azeventhubs.Processor on a client (an AMQP connection) of its own,
// balancing the partitions through one checkpoint store (in memory, as a
// blob container shared by the processes would be), and a dead-letter hub.
// idem's consumers are eventhubs.NewConsumer and the producer
// eventhubs.Send; the naive consumers are plain Processor loops
// checkpointing each event they charged. Event Hubs has no per-event
// settle, no delivery count and no dead-letter queue: a partition is read
// in order, its checkpoint (a position in it) moves after each batch of
// idem's consumers, a failed event is tried again in place, and dead
// letters go to a hub of their own. On idem's side a crash closes the
// process's clients, and its checkpoint store refuses it from then on
// (nothing it did since reaches the store, not even giving up its
// partitions): its partitions go to the group's other processes when their
// ownership expires (AckWait), from the last checkpoint, and what it did
// since comes back to them, where it is a duplicate. A naive process stops
// and gives its partitions up, as a kgo member leaving its group does in
// the Kafka demo. Event Hubs drops no producer retry (azeventhubs has no
// idempotent publishing, eventhubstest no duplicate detection): every one
// reaches the consumers.
var EventHubs = &Broker{name: "eventhubs", inProcess: true, start: func(ctx context.Context, cfg Config, runID string) (transport, error) {
	return startEventHubs(ctx, cfg)
}}

// ehBatchSize is how many events a consumer takes from a partition at a
// time; idem's consumers checkpoint after each batch, so a crash sends
// back up to a batch.
const ehBatchSize = 8

// ehMaxPartitions is Event Hubs Standard's most partitions a hub has.
const ehMaxPartitions = 32

type ehBroker struct {
	cfg        Config
	srv        *eventhubstest.Server
	cps        *eventhubstest.CheckpointStore // the processes' ownership and checkpoints
	producer   *azeventhubs.ProducerClient    // the orders' producer
	dlq        *azeventhubs.ProducerClient    // the naive side's dead letters (an event not of the demo's: never)
	hub, dead  string
	partitions int
	expiry     time.Duration // how long a process's ownership outlives it
}

func startEventHubs(_ context.Context, cfg Config) (_ *ehBroker, err error) {
	b := &ehBroker{cfg: cfg, cps: eventhubstest.NewCheckpointStore(), hub: "orders", dead: "orders-dlq",
		// Two partitions a consumer, as on Kafka: a crash stalls only the
		// crashed process's partitions, until the others take them.
		partitions: min(2*cfg.Consumers, ehMaxPartitions),
		expiry:     max(cfg.AckWait, 500*time.Millisecond)}
	if b.srv, err = eventhubstest.NewServer(); err != nil {
		return nil, fmt.Errorf("%w: in-process Event Hubs: %v", ErrBroker, err)
	}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	if err := b.srv.CreateHub(b.hub, eventhubstest.HubOptions{Partitions: b.partitions, ConsumerGroups: []string{"idem", "naive"}}); err != nil {
		return nil, fmt.Errorf("%w: create hub %s: %v", ErrBroker, b.hub, err)
	}
	if err := b.srv.CreateHub(b.dead, eventhubstest.HubOptions{Partitions: 1}); err != nil {
		return nil, fmt.Errorf("%w: create hub %s: %v", ErrBroker, b.dead, err)
	}
	if b.producer, err = b.producerOf(b.hub); err != nil {
		return nil, err
	}
	if b.dlq, err = b.producerOf(b.dead); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *ehBroker) producerOf(hub string) (*azeventhubs.ProducerClient, error) {
	p, err := azeventhubs.NewProducerClientFromConnectionString(b.srv.ConnectionString(), hub, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: producer of %s: %v", ErrBroker, hub, err)
	}
	return p, nil
}

func (b *ehBroker) name() string { return "in-process Azure Event Hubs (eventhubstest)" }

// lostAckCrashes: there is no ack, the consumer writes the partition's
// checkpoint itself (after its batch, on idem's side), so a lost one is
// injected as a crash before it, on the naive side too.
func (b *ehBroker) lostAckCrashes() bool { return true }

func (b *ehBroker) close() {
	for _, p := range []*azeventhubs.ProducerClient{b.producer, b.dlq} {
		if p != nil {
			closeEH(p.Close)
		}
	}
	if b.srv != nil {
		b.srv.Close()
	}
}

// closeEH closes an azeventhubs client, bounded: the process is going.
func closeEH(close func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = close(ctx)
}

// publish sends the order with eventhubs.Send, its id the MessageID (and
// so the Idem-Id property) and the partition key. Event Hubs drops no
// producer retry: every one reaches the consumers.
func (b *ehBroker) publish(ctx context.Context, m message, seq uint64) error {
	id, ct := m.Order.ID, "application/json"
	err := eventhubs.Send(ctx, b.producer, &azeventhubs.EventDataBatchOptions{PartitionKey: &id}, &azeventhubs.EventData{
		MessageID: &id, Body: m.payload(), ContentType: &ct,
		Properties: map[string]any{orderHeader: id, seqHeader: strconv.FormatUint(seq, 10)},
	})
	if err != nil {
		return fmt.Errorf("%w: publish %s: %v", ErrBroker, id, err)
	}
	return nil
}

// errCrashed is what a crashed consumer process's checkpoint store and
// handler answer.
var errCrashed = errors.New("the consumer crashed")

// ehProcess is a consumer process of a group: its client and its
// Processor, on a view of the checkpoint store that it can no longer
// write once it has crashed.
type ehProcess struct {
	cc   *azeventhubs.ConsumerClient
	p    *azeventhubs.Processor
	dead atomic.Bool
	once sync.Once
}

// process starts a consumer process of group: a client of its own and a
// Processor that claims its share of the partitions at once (greedy),
// renews its ownership every tenth of the expiry and starts a partition
// without a checkpoint at its earliest event.
func (b *ehBroker) process(group string) (*ehProcess, error) {
	cc, err := azeventhubs.NewConsumerClientFromConnectionString(b.srv.ConnectionString(), b.hub, group, nil)
	if err != nil {
		return nil, err
	}
	pr := &ehProcess{cc: cc}
	yes := true
	pr.p, err = azeventhubs.NewProcessor(cc, ehCheckpoints{cps: b.cps, pr: pr}, &azeventhubs.ProcessorOptions{
		LoadBalancingStrategy: azeventhubs.ProcessorStrategyGreedy,
		UpdateInterval:        max(b.expiry/10, 50*time.Millisecond), PartitionExpirationDuration: b.expiry,
		StartPositions: azeventhubs.StartPositions{Default: azeventhubs.StartPosition{Earliest: &yes}},
	})
	if err != nil {
		closeEH(cc.Close)
		return nil, err
	}
	return pr, nil
}

// crash ends the process as a dead one: its checkpoint store refuses it
// first (no checkpoint, no ownership given up), then its connection
// closes.
func (pr *ehProcess) crash() {
	pr.once.Do(func() {
		pr.dead.Store(true)
		closeEH(pr.cc.Close)
	})
}

// ehCheckpoints is the checkpoint store as one process sees it: refused
// once the process has crashed.
type ehCheckpoints struct {
	cps *eventhubstest.CheckpointStore
	pr  *ehProcess
}

func (c ehCheckpoints) ClaimOwnership(ctx context.Context, o []azeventhubs.Ownership, opts *azeventhubs.ClaimOwnershipOptions) ([]azeventhubs.Ownership, error) {
	if c.pr.dead.Load() {
		return nil, errCrashed
	}
	return c.cps.ClaimOwnership(ctx, o, opts)
}

func (c ehCheckpoints) ListCheckpoints(ctx context.Context, ns, hub, group string, opts *azeventhubs.ListCheckpointsOptions) ([]azeventhubs.Checkpoint, error) {
	if c.pr.dead.Load() {
		return nil, errCrashed
	}
	return c.cps.ListCheckpoints(ctx, ns, hub, group, opts)
}

func (c ehCheckpoints) ListOwnership(ctx context.Context, ns, hub, group string, opts *azeventhubs.ListOwnershipOptions) ([]azeventhubs.Ownership, error) {
	if c.pr.dead.Load() {
		return nil, errCrashed
	}
	return c.cps.ListOwnership(ctx, ns, hub, group, opts)
}

func (c ehCheckpoints) SetCheckpoint(ctx context.Context, cp azeventhubs.Checkpoint, opts *azeventhubs.SetCheckpointOptions) error {
	if c.pr.dead.Load() {
		return errCrashed
	}
	return c.cps.SetCheckpoint(ctx, cp, opts)
}

// consumeIdem runs one idem consumer process: eventhubs.NewConsumer on a
// Processor of the "idem" group, whose hooks count what happens and inject
// the chaos. A crash (after the charge is durable, before its batch's
// checkpoint) ends the process: the checkpoint never reaches the store,
// and the batch comes back to the process that takes the partition when
// the crashed one's ownership expires, where its events are duplicates.
// The process's dead letters go to the dead-letter hub through a producer
// of its own, closed with it.
func (b *ehBroker) consumeIdem(ctx context.Context, r *runner) {
	s := r.idem
	pr, err := b.process("idem")
	if err != nil {
		s.fail(fmt.Errorf("the broker: %w", err))
		sleep(ctx, 50*time.Millisecond)
		return
	}
	dead, err := b.producerOf(b.dead)
	if err != nil {
		pr.crash()
		s.fail(err)
		sleep(ctx, 50*time.Millisecond)
		return
	}
	cctx, kill := context.WithCancel(ctx)
	var once sync.Once
	crash := func() {
		once.Do(func() {
			kill()
			pr.crash()
			closeEH(dead.Close)
		})
	}
	defer crash()
	f := newTryFaults(r, ehSeq)
	h, err := adapterHandler(r, func(ev *azeventhubs.ReceivedEventData) (Order, bool, error) {
		var o Order
		if pr.dead.Load() {
			// Another partition's event crashed the process: a dead
			// process charges nothing more.
			return o, false, errCrashed
		}
		if err := json.Unmarshal(ev.Body, &o); err != nil || ehSeq(ev) == 0 {
			return o, false, idem.Permanent(errors.New("not a demo order"))
		}
		return o, f.of(ev) == faultHandler, nil
	}, eventhubs.Handle, eventhubs.HandleTx[*sql.Tx], eventhubs.HandleTx[pgx.Tx])
	if err != nil {
		s.fail(err)
		sleep(ctx, time.Second)
		return
	}
	c, err := eventhubs.NewConsumer(pr.p, r.guard, h, eventhubs.Options{
		DeadLetter: dead, EventHub: b.hub,
		Concurrency: b.partitions, BatchSize: ehBatchSize, ReceiveWait: 200 * time.Millisecond,
		Backoff: func(int) time.Duration { return 20 * time.Millisecond }, ShutdownTimeout: 2 * time.Second,
		Hooks: broker.Hooks[*azeventhubs.ReceivedEventData]{
			BeforeSettle: func(_ context.Context, ev *azeventhubs.ReceivedEventData, rep broker.Report) {
				if pr.dead.Load() {
					return // what a dead process does is not on the record
				}
				fl := f.of(ev)
				if rep.Result.Outcome != idem.OutcomeProcessed && (fl == faultCrash || fl == faultAckLost) {
					// A crash sends back every event since the
					// checkpoint: drawn again on those duplicates,
					// crashes would breed crashes. It comes where it
					// matters, after a charge.
					fl = faultNone
				}
				r.beforeSettle(rep, fl, crash)
			},
			AfterSettle: func(_ context.Context, ev *azeventhubs.ReceivedEventData, rep broker.Report) {
				f.done(ev)
				// Crashed (or the run is over), the event's batch is
				// not checkpointed: the process that takes its
				// partition settles it.
				r.afterSettle(ehSeq(ev), rep, pr.dead.Load() || cctx.Err() != nil)
			},
		}})
	if err != nil {
		s.fail(err)
		sleep(ctx, time.Second)
		return
	}
	_ = c.Run(cctx)
}

func ehSeq(ev *azeventhubs.ReceivedEventData) uint64 { return seqOf(ehProperty(ev, seqHeader)) }

func ehProperty(ev *azeventhubs.ReceivedEventData, name string) string {
	v, _ := ev.Properties[name].(string)
	return v
}

// open starts a naive consumer process: a Processor of the "naive" group
// whose partitions each hand their batches, one at a time, to the demo's
// loop, which checkpoints each event it charged (the most a consumer
// without dedup can do: a crash before the checkpoint still charges the
// event again).
func (b *ehBroker) open(ctx context.Context, group string) (session, error) {
	pr, err := b.process(group)
	if err != nil {
		return nil, err
	}
	pctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s := &ehSession{b: b, pr: pr, batches: make(chan *ehBatch), stop: stop, done: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = pr.p.Run(pctx)
	}()
	go func() {
		defer wg.Done()
		for {
			pc := pr.p.NextPartitionClient(pctx)
			if pc == nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.partition(pctx, pc)
			}()
		}
	}()
	go func() {
		wg.Wait()
		close(s.done)
	}()
	return s, nil
}

type ehSession struct {
	b       *ehBroker
	pr      *ehProcess
	batches chan *ehBatch
	stop    context.CancelFunc
	done    chan struct{} // the Processor and its partitions have stopped
}

// ehBatch is a batch of a partition on its way through the demo's loop.
type ehBatch struct {
	pc      *azeventhubs.ProcessorPartitionClient
	evs     []*azeventhubs.ReceivedEventData
	handled chan bool // true: every event of it was settled; false: the loop stopped within it
}

// partition reads one owned partition until the session ends, the
// partition's ownership moves or the loop stops within a batch (the
// Processor hands the partition out again, from its checkpoint): a batch,
// handed to the loop, the next once the loop has settled it all.
func (s *ehSession) partition(ctx context.Context, pc *azeventhubs.ProcessorPartitionClient) {
	defer closeEH(pc.Close)
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		evs, err := pc.ReceiveEvents(rctx, ehBatchSize, nil)
		cancel()
		var ehErr *azeventhubs.Error
		if errors.As(err, &ehErr) && ehErr.Code == azeventhubs.ErrorCodeOwnershipLost {
			return // another process owns it now; it starts from the checkpoint
		}
		if len(evs) == 0 {
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				sleep(ctx, 50*time.Millisecond)
			}
			continue
		}
		bt := &ehBatch{pc: pc, evs: evs, handled: make(chan bool, 1)}
		select {
		case s.batches <- bt:
		case <-ctx.Done():
			return
		}
		var all bool
		select {
		case all = <-bt.handled:
		case <-ctx.Done():
			return
		}
		if !all {
			return
		}
	}
}

// fetch takes the next batch any partition has within a short wait and
// yields its events in order. Event Hubs cannot redeliver one event: a
// retried event is handed again, after its delay, before the next one.
func (s *ehSession) fetch(ctx context.Context) iter.Seq[delivery] {
	return func(yield func(delivery) bool) {
		var bt *ehBatch
		t := time.NewTimer(250 * time.Millisecond)
		defer t.Stop()
		select {
		case bt = <-s.batches:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
		all := false
		defer func() { bt.handled <- all }()
		for _, ev := range bt.evs {
			d := &ehDelivery{s: s, pc: bt.pc, ev: ev}
			for {
				if !yield(d) || d.ackErr != nil {
					return // the checkpoint failed: the partition is read again from it
				}
				if !d.again {
					break
				}
				d.again = false
				sleep(ctx, d.delay)
				if ctx.Err() != nil {
					return
				}
			}
		}
		all = true
	}
}

// close ends the session: its Processor stops and gives its partitions
// up, as a kgo member leaving its group does on Kafka, so that the next
// process takes them at once from their checkpoints; what the session
// charged without checkpointing it (the event it crashed on) comes back
// with them. Then its client closes.
func (s *ehSession) close() {
	s.stop()
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
	}
	s.pr.crash()
}

type ehDelivery struct {
	s      *ehSession
	pc     *azeventhubs.ProcessorPartitionClient
	ev     *azeventhubs.ReceivedEventData
	again  bool
	delay  time.Duration
	ackErr error
}

func (d *ehDelivery) seq() uint64  { return ehSeq(d.ev) }
func (d *ehDelivery) data() []byte { return d.ev.Body }
func (d *ehDelivery) key() string  { return ehProperty(d.ev, orderHeader) }

// ack moves the partition's checkpoint to the event. Event Hubs has no
// settle of one event: the checkpoint is a position in the partition,
// where a process that takes it over starts.
func (d *ehDelivery) ack(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	d.ackErr = d.pc.UpdateCheckpoint(ctx, d.ev, nil)
	return d.ackErr
}

func (d *ehDelivery) retry(delay time.Duration) { d.again, d.delay = true, delay }

// deadLetter sends the event to the dead-letter hub with eventhubs's
// dead-letter properties, then moves the checkpoint past it.
func (d *ehDelivery) deadLetter(ctx context.Context, reason string, cause error) error {
	dl := eventhubs.DeadLetter(d.s.b.hub, d.pc.PartitionID(), d.ev, map[string]string{
		idem.HeaderReason: reason, idem.HeaderError: strings.ReplaceAll(cause.Error(), "\n", " "),
	})
	batch, err := d.s.b.dlq.NewEventDataBatch(ctx, &azeventhubs.EventDataBatchOptions{PartitionKey: d.ev.PartitionKey})
	if err != nil {
		return err
	}
	if err := batch.AddEventData(dl, nil); err != nil {
		return err
	}
	if err := d.s.b.dlq.SendEventDataBatch(ctx, batch, nil); err != nil {
		return err
	}
	return d.ack(ctx)
}
