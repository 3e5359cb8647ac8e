package eventhubs_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/eventhubs"
	"github.com/idemgo/idem/broker/eventhubs/eventhubstest"
	"github.com/idemgo/idem/store/memory"
)

type env struct {
	srv      *eventhubstest.Server
	producer *azeventhubs.ProducerClient
	dlq      *azeventhubs.ProducerClient
	cps      *eventhubstest.CheckpointStore
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv, err := eventhubstest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	for _, h := range []string{"orders", "orders-dlq"} {
		if err := srv.CreateHub(h, eventhubstest.HubOptions{Partitions: 2}); err != nil {
			t.Fatal(err)
		}
	}
	e := &env{srv: srv, cps: eventhubstest.NewCheckpointStore()}
	e.producer = e.producerOf(t, "orders")
	e.dlq = e.producerOf(t, "orders-dlq")
	return e
}

func (e *env) producerOf(t *testing.T, hub string) *azeventhubs.ProducerClient {
	p, err := azeventhubs.NewProducerClientFromConnectionString(e.srv.ConnectionString(), hub, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

func (e *env) processor(t *testing.T) *azeventhubs.Processor {
	cc, err := azeventhubs.NewConsumerClientFromConnectionString(e.srv.ConnectionString(), "orders", azeventhubs.DefaultConsumerGroup, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close(context.Background()) })
	yes := true
	p, err := azeventhubs.NewProcessor(cc, e.cps, &azeventhubs.ProcessorOptions{
		StartPositions: azeventhubs.StartPositions{Default: azeventhubs.StartPosition{Earliest: &yes}},
		UpdateInterval: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// seq is the sequence number of partition's checkpoint (-1: none).
func (e *env) seq(partition string) int64 {
	cps, _ := e.cps.ListCheckpoints(context.Background(), e.srv.Addr(), "orders", azeventhubs.DefaultConsumerGroup, nil)
	for _, c := range cps {
		if c.PartitionID == partition && c.SequenceNumber != nil {
			return *c.SequenceNumber
		}
	}
	return -1
}

func event(id, body string) *azeventhubs.EventData {
	return &azeventhubs.EventData{MessageID: &id, Body: []byte(body)}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A producer's re-send of the same event (new sequence number, same key)
// is applied once; a key reused with other content is dead-lettered with
// idem's properties and where it came from; checkpoints move past both.
func TestConsumerDedupAndDeadLetter(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	key := "k"
	opts := &azeventhubs.EventDataBatchOptions{PartitionKey: &key}
	if err := eventhubs.Send(ctx, e.producer, opts, event("a", "one"), event("b", "two")); err != nil {
		t.Fatal(err)
	}
	// The producer retries: the same events again, and "a" reused with
	// other content.
	if err := eventhubs.Send(ctx, e.producer, opts, event("a", "one"), event("a", "other")); err != nil {
		t.Fatal(err)
	}
	g, err := eventhubs.NewGuard(memory.New(), "orders", azeventhubs.DefaultConsumerGroup, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var applied []string
	h := eventhubs.Handle(func(ctx context.Context, ev *azeventhubs.ReceivedEventData) ([]byte, error) {
		mu.Lock()
		applied = append(applied, string(ev.Body))
		mu.Unlock()
		return nil, nil
	})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- eventhubs.Consume(rctx, e.processor(t), g, h, eventhubs.Options{DeadLetter: e.dlq, EventHub: "orders"})
	}()
	var part string
	for _, id := range []string{"0", "1"} {
		if n, _ := e.srv.Count("orders", id); n == 4 {
			part = id
		}
	}
	waitFor(t, "the checkpoint past the fourth event", func() bool { return e.seq(part) == 3 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(applied, []string{"one", "two"}) {
		t.Fatalf("applied %v, want [one two]", applied)
	}
	// The dead letter.
	cc, err := azeventhubs.NewConsumerClientFromConnectionString(e.srv.ConnectionString(), "orders-dlq", azeventhubs.DefaultConsumerGroup, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close(ctx)
	var dls []*azeventhubs.ReceivedEventData
	for _, id := range []string{"0", "1"} {
		yes := true
		pc, err := cc.NewPartitionClient(id, &azeventhubs.PartitionClientOptions{StartPosition: azeventhubs.StartPosition{Earliest: &yes}})
		if err != nil {
			t.Fatal(err)
		}
		rc, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		evs, _ := pc.ReceiveEvents(rc, 10, nil)
		cancel()
		pc.Close(ctx)
		dls = append(dls, evs...)
	}
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	im, err := eventhubs.DeadLetterOf(dls[0])
	if err != nil {
		t.Fatal(err)
	}
	if im.ID != "a" || string(im.Payload) != "other" || im.Headers[idem.HeaderReason] != "conflict" ||
		im.Headers[eventhubs.HeaderOriginalPartition] != part || im.Headers[eventhubs.HeaderOriginalSequenceNumber] != "3" ||
		im.Headers[eventhubs.HeaderOriginalEventHub] != "orders" {
		t.Fatalf("dead letter %+v", im)
	}
	// Replay sends the original back: the same key, the same conflict.
	if err := eventhubs.Replay(ctx, e.producer, dls[0]); err != nil {
		t.Fatal(err)
	}
	if n, _ := e.srv.Count("orders", part); n != 5 {
		t.Fatalf("replayed into partition %s: %d events", part, n)
	}
	if _, err := eventhubs.DeadLetterOf(&azeventhubs.ReceivedEventData{}); !errors.Is(err, eventhubs.ErrNotDeadLetter) {
		t.Fatalf("DeadLetterOf a plain event: %v", err)
	}
}

func TestOptionsRefused(t *testing.T) {
	e := newEnv(t)
	g, _ := eventhubs.NewGuard(memory.New(), "orders", "$Default", idem.Options{})
	h := eventhubs.Handle(func(context.Context, *azeventhubs.ReceivedEventData) ([]byte, error) { return nil, nil })
	for name, opts := range map[string]eventhubs.Options{
		"no dead letter": {},
		"negative batch": {DeadLetter: e.dlq, BatchSize: -1},
	} {
		if _, err := eventhubs.NewConsumer(e.processor(t), g, h, opts); !errors.Is(err, idem.ErrInvalidOptions) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := eventhubs.NewGuard(memory.New(), "", "", idem.Options{}); !errors.Is(err, idem.ErrInvalidOptions) {
		t.Errorf("a guard without a scope: %v", err)
	}
	if err := eventhubs.Send(context.Background(), e.producer, nil, &azeventhubs.EventData{Body: []byte("x")}); !errors.Is(err, idem.ErrInvalidKey) {
		t.Errorf("Send without MessageID: %v", err)
	}
}

// failingStore is a CheckpointStore whose ownership claims fail once
// failing is set, as a database that went away.
type failingStore struct {
	*eventhubstest.CheckpointStore
	failing atomic.Bool
}

var errStoreGone = errors.New("checkpoint store unreachable")

func (f *failingStore) ClaimOwnership(ctx context.Context, o []azeventhubs.Ownership, opts *azeventhubs.ClaimOwnershipOptions) ([]azeventhubs.Ownership, error) {
	if f.failing.Load() {
		return nil, errStoreGone
	}
	return f.CheckpointStore.ClaimOwnership(ctx, o, opts)
}

// A Processor whose CheckpointStore fails stops and closes its partition
// clients: the consumer's partitions stop with it, and Run returns the
// processor's error (it spun on the closed clients for ever before).
func TestConsumerStopsWithItsProcessor(t *testing.T) {
	e := newEnv(t)
	fs := &failingStore{CheckpointStore: e.cps}
	e.cps = nil
	cc, err := azeventhubs.NewConsumerClientFromConnectionString(e.srv.ConnectionString(), "orders", azeventhubs.DefaultConsumerGroup, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close(context.Background()) })
	p, err := azeventhubs.NewProcessor(cc, fs, &azeventhubs.ProcessorOptions{UpdateInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	g, err := eventhubs.NewGuard(memory.New(), "orders", azeventhubs.DefaultConsumerGroup, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := eventhubs.Handle(func(context.Context, *azeventhubs.ReceivedEventData) ([]byte, error) { return nil, nil })
	done := make(chan error, 1)
	go func() {
		done <- eventhubs.Consume(context.Background(), p, g, h, eventhubs.Options{DeadLetter: e.dlq, EventHub: "orders", ReceiveWait: 50 * time.Millisecond})
	}()
	waitFor(t, "both partitions owned", func() bool {
		own, _ := fs.ListOwnership(context.Background(), e.srv.Addr(), "orders", azeventhubs.DefaultConsumerGroup, nil)
		return len(own) == 2
	})
	fs.failing.Store(true)
	select {
	case err := <-done:
		if !errors.Is(err, errStoreGone) {
			t.Fatalf("Consume returned %v, want the checkpoint store's error", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Consume still runs 15s after its Processor stopped")
	}
}
