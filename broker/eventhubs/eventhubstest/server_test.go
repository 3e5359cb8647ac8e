package eventhubstest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"
	"github.com/idemgo/idem/broker/eventhubs/eventhubstest"
)

// Every test goes through the real azeventhubs client, unmodified.

func newServer(t *testing.T, hub string, opts eventhubstest.HubOptions, sopts ...eventhubstest.Options) *eventhubstest.Server {
	t.Helper()
	srv, err := eventhubstest.NewServer(sopts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if err := srv.CreateHub(hub, opts); err != nil {
		t.Fatal(err)
	}
	return srv
}

// noRetry keeps a refusal from being retried for long.
var noRetry = azeventhubs.RetryOptions{MaxRetries: -1}

func producer(t *testing.T, srv *eventhubstest.Server, hub string) *azeventhubs.ProducerClient {
	t.Helper()
	p, err := azeventhubs.NewProducerClientFromConnectionString(srv.ConnectionString(), hub,
		&azeventhubs.ProducerClientOptions{RetryOptions: noRetry})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

func consumer(t *testing.T, srv *eventhubstest.Server, hub, group string) *azeventhubs.ConsumerClient {
	t.Helper()
	c, err := azeventhubs.NewConsumerClientFromConnectionString(srv.ConnectionString(), hub, group,
		&azeventhubs.ConsumerClientOptions{RetryOptions: noRetry})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// send sends bodies in one batch with opts.
func send(t *testing.T, p *azeventhubs.ProducerClient, opts *azeventhubs.EventDataBatchOptions, bodies ...string) {
	t.Helper()
	ctx := ctxT(t)
	b, err := p.NewEventDataBatch(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range bodies {
		if err := b.AddEventData(&azeventhubs.EventData{Body: []byte(body), MessageID: to("id-" + body),
			Properties: map[string]any{"k": body}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.SendEventDataBatch(ctx, b, nil); err != nil {
		t.Fatal(err)
	}
}

func partitionClient(t *testing.T, c *azeventhubs.ConsumerClient, id string, opts *azeventhubs.PartitionClientOptions) *azeventhubs.PartitionClient {
	t.Helper()
	pc, err := c.NewPartitionClient(id, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close(context.Background()) })
	return pc
}

// receive reads n events from pc, or fails.
func receive(t *testing.T, pc *azeventhubs.PartitionClient, n int) []*azeventhubs.ReceivedEventData {
	t.Helper()
	ctx := ctxT(t)
	var got []*azeventhubs.ReceivedEventData
	for len(got) < n {
		evs, err := pc.ReceiveEvents(ctx, n-len(got), nil)
		got = append(got, evs...)
		if err != nil && len(got) < n {
			t.Fatalf("received %d of %d: %v", len(got), n, err)
		}
	}
	return got
}

func bodies(evs []*azeventhubs.ReceivedEventData) string {
	var b []string
	for _, e := range evs {
		b = append(b, string(e.Body))
	}
	return strings.Join(b, ",")
}

func earliest() *azeventhubs.PartitionClientOptions {
	t := true
	return &azeventhubs.PartitionClientOptions{StartPosition: azeventhubs.StartPosition{Earliest: &t}}
}

func TestProperties(t *testing.T) {
	srv := newServer(t, "orders", eventhubstest.HubOptions{Partitions: 3})
	p := producer(t, srv, "orders")
	ctx := ctxT(t)
	hp, err := p.GetEventHubProperties(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if hp.Name != "orders" || strings.Join(hp.PartitionIDs, ",") != "0,1,2" || hp.CreatedOn.IsZero() {
		t.Fatalf("hub properties %+v", hp)
	}
	pp, err := p.GetPartitionProperties(ctx, "1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !pp.IsEmpty || pp.LastEnqueuedSequenceNumber != -1 || pp.PartitionID != "1" {
		t.Fatalf("empty partition %+v", pp)
	}
	pid := "1"
	send(t, p, &azeventhubs.EventDataBatchOptions{PartitionID: &pid}, "a", "b")
	pp, err = p.GetPartitionProperties(ctx, "1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if pp.IsEmpty || pp.BeginningSequenceNumber != 0 || pp.LastEnqueuedSequenceNumber != 1 || pp.LastEnqueuedOffset == "" || pp.LastEnqueuedOn.IsZero() {
		t.Fatalf("partition after two events %+v", pp)
	}
	if _, err := p.GetPartitionProperties(ctx, "9", nil); err == nil {
		t.Fatal("properties of a partition that does not exist")
	}
}

func TestSendReceivePartition(t *testing.T) {
	srv := newServer(t, "orders", eventhubstest.HubOptions{Partitions: 2})
	p := producer(t, srv, "orders")
	pid := "0"
	send(t, p, &azeventhubs.EventDataBatchOptions{PartitionID: &pid}, "a", "b", "c")
	pc := partitionClient(t, consumer(t, srv, "orders", azeventhubs.DefaultConsumerGroup), "0", earliest())
	evs := receive(t, pc, 3)
	if bodies(evs) != "a,b,c" {
		t.Fatalf("bodies %s", bodies(evs))
	}
	for i, e := range evs {
		if e.SequenceNumber != int64(i) || e.EnqueuedTime == nil || e.Offset == "" || e.MessageID == nil ||
			*e.MessageID != "id-"+string(e.Body) || e.Properties["k"] != string(e.Body) {
			t.Fatalf("event %d: seq %d offset %q id %v props %v", i, e.SequenceNumber, e.Offset, e.MessageID, e.Properties)
		}
	}
	if n, _ := srv.Count("orders", "1"); n != 0 {
		t.Fatalf("partition 1 holds %d events", n)
	}
}

func TestStartPositions(t *testing.T) {
	srv := newServer(t, "h", eventhubstest.HubOptions{Partitions: 1})
	p := producer(t, srv, "h")
	pid := "0"
	send(t, p, &azeventhubs.EventDataBatchOptions{PartitionID: &pid}, "a", "b", "c")
	c := consumer(t, srv, "h", azeventhubs.DefaultConsumerGroup)
	first := receive(t, partitionClient(t, c, "0", earliest()), 3)
	yes := true
	seq := int64(1)
	cases := []struct {
		name string
		pos  azeventhubs.StartPosition
		want string
	}{
		{"earliest", azeventhubs.StartPosition{Earliest: &yes}, "a,b,c"},
		{"sequence", azeventhubs.StartPosition{SequenceNumber: &seq}, "c"},
		{"sequence inclusive", azeventhubs.StartPosition{SequenceNumber: &seq, Inclusive: true}, "b,c"},
		{"offset", azeventhubs.StartPosition{Offset: &first[0].Offset}, "b,c"},
		{"offset inclusive", azeventhubs.StartPosition{Offset: &first[1].Offset, Inclusive: true}, "b,c"},
		{"enqueued time", azeventhubs.StartPosition{EnqueuedTime: to(first[0].EnqueuedTime.Add(-time.Second))}, "a,b,c"},
		{"latest", azeventhubs.StartPosition{Latest: &yes}, "d"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pc := partitionClient(t, c, "0", &azeventhubs.PartitionClientOptions{StartPosition: tc.pos})
			if tc.name == "latest" {
				// The link opens on the first receive: open it, then send.
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				pc.ReceiveEvents(ctx, 1, nil)
				cancel()
				send(t, p, &azeventhubs.EventDataBatchOptions{PartitionID: &pid}, "d")
			}
			n := strings.Count(tc.want, ",") + 1
			if got := bodies(receive(t, pc, n)); got != tc.want {
				t.Fatalf("case %d: got %s, want %s", i, got, tc.want)
			}
		})
	}
}

func to[T any](v T) *T { return &v }

func TestPartitionKey(t *testing.T) {
	srv := newServer(t, "h", eventhubstest.HubOptions{Partitions: 4})
	p := producer(t, srv, "h")
	for i := range 4 {
		send(t, p, &azeventhubs.EventDataBatchOptions{PartitionKey: to("customer-7")}, fmt.Sprint("k", i))
		send(t, p, nil, fmt.Sprint("r", i), fmt.Sprint("s", i))
	}
	var keyed, spread int
	for id := range 4 {
		n, _ := srv.Count("h", fmt.Sprint(id))
		if n >= 4 {
			keyed++
		}
		if n > 0 {
			spread++
		}
	}
	if keyed != 1 || spread != 4 {
		t.Fatalf("one key's events in one partition (%d), batches round robin over all four (%d)", keyed, spread)
	}
	// A batch stays whole in one partition.
	total := 0
	for id := range 4 {
		evs := receive(t, partitionClient(t, consumer(t, srv, "h", azeventhubs.DefaultConsumerGroup), fmt.Sprint(id), earliest()), func() int {
			n, _ := srv.Count("h", fmt.Sprint(id))
			return n
		}())
		for i, e := range evs {
			if strings.HasPrefix(string(e.Body), "r") && (i+1 >= len(evs) || string(evs[i+1].Body) != "s"+string(e.Body[1:])) {
				t.Fatalf("partition %d: batch split: %s", id, bodies(evs))
			}
			if strings.HasPrefix(string(e.Body), "k") && (e.PartitionKey == nil || *e.PartitionKey != "customer-7") {
				t.Fatalf("keyed event without its key: %v", e.PartitionKey)
			}
		}
		total += len(evs)
	}
	if total != 12 {
		t.Fatalf("%d events", total)
	}
}

func TestBatchSizeLimit(t *testing.T) {
	srv := newServer(t, "h", eventhubstest.HubOptions{Partitions: 1}, eventhubstest.Options{MaxMessageSize: 4096})
	p := producer(t, srv, "h")
	ctx := ctxT(t)
	b, err := p.NewEventDataBatch(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		err := b.AddEventData(&azeventhubs.EventData{Body: make([]byte, 500)}, nil)
		if errors.Is(err, azeventhubs.ErrEventDataTooLarge) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n < 5 || n > 8 || b.NumBytes() > 4096 {
		t.Fatalf("%d events of 500 bytes in a batch of %d bytes, limit 4096", n, b.NumBytes())
	}
	if err := p.SendEventDataBatch(ctx, b, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := srv.Count("h", "0"); got != n {
		t.Fatalf("partition holds %d events, want %d", got, n)
	}
	if _, err := p.NewEventDataBatch(ctx, &azeventhubs.EventDataBatchOptions{MaxBytes: 8192}); err == nil {
		t.Fatal("a batch larger than the link's maximum")
	}
}

func TestConsumerGroups(t *testing.T) {
	srv := newServer(t, "h", eventhubstest.HubOptions{Partitions: 1, ConsumerGroups: []string{"billing"}})
	p := producer(t, srv, "h")
	pid := "0"
	send(t, p, &azeventhubs.EventDataBatchOptions{PartitionID: &pid}, "a", "b")
	for _, g := range []string{azeventhubs.DefaultConsumerGroup, "billing"} {
		if got := bodies(receive(t, partitionClient(t, consumer(t, srv, "h", g), "0", earliest()), 2)); got != "a,b" {
			t.Fatalf("group %s: %s", g, got)
		}
	}
	pc := partitionClient(t, consumer(t, srv, "h", "nobody"), "0", earliest())
	start := time.Now()
	if _, err := pc.ReceiveEvents(ctxT(t), 1, nil); err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("unknown group: %v after %v", err, time.Since(start))
	}
}

func TestOwnerLevel(t *testing.T) {
	srv := newServer(t, "h", eventhubstest.HubOptions{Partitions: 1, ConsumerGroups: []string{"other"}})
	p := producer(t, srv, "h")
	pid := "0"
	send(t, p, &azeventhubs.EventDataBatchOptions{PartitionID: &pid}, "a")
	c := consumer(t, srv, "h", azeventhubs.DefaultConsumerGroup)
	opts := func(level int64) *azeventhubs.PartitionClientOptions {
		o := earliest()
		o.OwnerLevel = &level
		return o
	}
	low := partitionClient(t, c, "0", opts(0))
	receive(t, low, 1)
	// Another group is not affected.
	other := partitionClient(t, consumer(t, srv, "h", "other"), "0", opts(5))
	receive(t, other, 1)

	high := partitionClient(t, c, "0", opts(1))
	receive(t, high, 1)
	_, err := low.ReceiveEvents(ctxT(t), 1, nil)
	var ehErr *azeventhubs.Error
	if !errors.As(err, &ehErr) || ehErr.Code != azeventhubs.ErrorCodeOwnershipLost {
		t.Fatalf("the lower owner: %v, want ErrorCodeOwnershipLost", err)
	}
	// A lower owner level, or none, is refused while the higher holds it.
	for _, o := range []*azeventhubs.PartitionClientOptions{opts(0), earliest()} {
		_, err := partitionClient(t, c, "0", o).ReceiveEvents(ctxT(t), 1, nil)
		if !errors.As(err, &ehErr) || ehErr.Code != azeventhubs.ErrorCodeOwnershipLost {
			t.Fatalf("a lower owner level: %v, want ErrorCodeOwnershipLost", err)
		}
	}
	// An equal owner level takes it (as a Processor that takes a
	// partition over does).
	same := partitionClient(t, c, "0", opts(1))
	receive(t, same, 1)
	if _, err := high.ReceiveEvents(ctxT(t), 1, nil); !errors.As(err, &ehErr) || ehErr.Code != azeventhubs.ErrorCodeOwnershipLost {
		t.Fatalf("taken by an equal owner level: %v", err)
	}
}

func TestUnmodelledRefusedAtOnce(t *testing.T) {
	srv := newServer(t, "h", eventhubstest.HubOptions{Partitions: 1})
	start := time.Now()
	_, err := producer(t, srv, "nohub").GetEventHubProperties(ctxT(t), nil)
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("properties of an unknown hub: %v after %v", err, time.Since(start))
	}
	start = time.Now()
	pid := "7"
	_, err = producer(t, srv, "h").NewEventDataBatch(ctxT(t), &azeventhubs.EventDataBatchOptions{PartitionID: &pid})
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("a sender to an unknown partition: %v after %v", err, time.Since(start))
	}
}

// clock is a test's clock for Options.Now, moved by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestRetention: an event older than its hub's retention is gone from
// reads and from the earliest position, and the partition's
// BeginningSequenceNumber moves past it; a hub without retention keeps
// everything.
func TestRetention(t *testing.T) {
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	srv := newServer(t, "h", eventhubstest.HubOptions{Partitions: 1, Retention: time.Hour}, eventhubstest.Options{Now: clk.Now})
	if err := srv.CreateHub("keep", eventhubstest.HubOptions{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	p, keep := producer(t, srv, "h"), producer(t, srv, "keep")
	c, kc := consumer(t, srv, "h", azeventhubs.DefaultConsumerGroup), consumer(t, srv, "keep", azeventhubs.DefaultConsumerGroup)
	ctx := ctxT(t)
	pid := "0"
	props := func(p *azeventhubs.ProducerClient) azeventhubs.PartitionProperties {
		t.Helper()
		pp, err := p.GetPartitionProperties(ctx, pid, nil)
		if err != nil {
			t.Fatal(err)
		}
		return pp
	}
	send(t, p, &azeventhubs.EventDataBatchOptions{PartitionID: &pid}, "a", "b")
	send(t, keep, &azeventhubs.EventDataBatchOptions{PartitionID: &pid}, "a", "b")
	clk.advance(40 * time.Minute)
	send(t, p, &azeventhubs.EventDataBatchOptions{PartitionID: &pid}, "c")
	clk.advance(30 * time.Minute) // a and b are 70 minutes old, c 30

	if pp := props(p); pp.IsEmpty || pp.BeginningSequenceNumber != 2 || pp.LastEnqueuedSequenceNumber != 2 {
		t.Fatalf("properties after a and b expired: %+v", pp)
	}
	if n, _ := srv.Count("h", pid); n != 1 {
		t.Fatalf("Count %d after a and b expired, want 1", n)
	}
	if got := bodies(receive(t, partitionClient(t, c, pid, earliest()), 1)); got != "c" {
		t.Fatalf("earliest after a and b expired: %s, want c", got)
	}
	zero := int64(0)
	from0 := &azeventhubs.PartitionClientOptions{StartPosition: azeventhubs.StartPosition{SequenceNumber: &zero, Inclusive: true}}
	if got := bodies(receive(t, partitionClient(t, c, pid, from0), 1)); got != "c" {
		t.Fatalf("from sequence number 0 after a and b expired: %s, want c", got)
	}
	if pp := props(keep); pp.BeginningSequenceNumber != 0 {
		t.Fatalf("the hub without retention: %+v", pp)
	}
	if got := bodies(receive(t, partitionClient(t, kc, pid, earliest()), 2)); got != "a,b" {
		t.Fatalf("the hub without retention: %s, want a,b", got)
	}

	clk.advance(time.Hour) // c expired too: the partition is empty
	if pp := props(p); !pp.IsEmpty || pp.BeginningSequenceNumber != 3 || pp.LastEnqueuedSequenceNumber != 2 {
		t.Fatalf("properties after every event expired: %+v", pp)
	}
	send(t, p, &azeventhubs.EventDataBatchOptions{PartitionID: &pid}, "d")
	evs := receive(t, partitionClient(t, c, pid, earliest()), 1)
	if got := bodies(evs); got != "d" || evs[0].SequenceNumber != 3 || !evs[0].EnqueuedTime.Equal(clk.Now()) {
		t.Fatalf("earliest after every event expired and d sent: %s (sequence number %d, enqueued %v)", got, evs[0].SequenceNumber, evs[0].EnqueuedTime)
	}
}
