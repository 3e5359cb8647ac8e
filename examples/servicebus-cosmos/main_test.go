package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/servicebus"
	"github.com/idemgo/idem/broker/servicebus/servicebustest"
	"github.com/idemgo/idem/store/cosmos/cosmostest"
)

// newOrders starts an in-process Cosmos DB and creates the orders
// container in it.
func newOrders(t *testing.T) *azcosmos.ContainerClient {
	t.Helper()
	srv, err := cosmostest.NewServer(cosmostest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	c, err := srv.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	orders, err := CreateOrders(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return orders
}

// newBus starts an in-process Service Bus with the queue "orders" (its
// duplicate detection on) and returns it with a client.
func newBus(t *testing.T, lock time.Duration) (*servicebustest.Server, *azservicebus.Client) {
	t.Helper()
	srv, err := servicebustest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if err := srv.CreateQueue("orders", servicebustest.QueueOptions{RequiresDuplicateDetection: true, LockDuration: lock}); err != nil {
		t.Fatal(err)
	}
	client, err := azservicebus.NewClientFromConnectionString(srv.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(context.Background()) })
	return srv, client
}

// partition returns the documents of an order's partition by id.
func partition(t *testing.T, orders *azcosmos.ContainerClient, orderID string) map[string]map[string]any {
	t.Helper()
	pager := orders.NewQueryItemsPager("SELECT * FROM c", azcosmos.NewPartitionKeyString(orderID), nil)
	docs := map[string]map[string]any{}
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			var d map[string]any
			if err := json.Unmarshal(it, &d); err != nil {
				t.Fatal(err)
			}
			docs[d["id"].(string)] = d
		}
	}
	return docs
}

func order(id string, lines int) Order {
	o := Order{ID: id, Customer: "c-" + id}
	for i := range lines {
		o.Lines = append(o.Lines, Line{SKU: fmt.Sprintf("sku-%d", i), Qty: i + 1, Price: 100})
	}
	return o
}

// TestSevenSteps runs the seed's example end to end and checks each step:
//
//	producer  MessageId is the order id (servicebus.Send); a retry of the
//	          same order is dropped by the queue's duplicate detection
//	PeekLock  a message whose lock runs out under its handler comes back
//	          to another delivery, and is stored once
//	container partitioned by /orderId, the order document's id the order
//	          id, its lines in its partition
//	1-3       the key is the order id; the create goes in; the message is
//	          completed (the queue ends empty)
//	4-5       a redelivery (its completion lost with the connection) meets
//	          the stored order (409), reads it, finds the same request
//	          hash: a duplicate, completed, nothing written
//	6         an order id reused with other content: the stored hash
//	          differs, so the message is dead-lettered with idem's
//	          properties and an alert (OnDeadLetter), the order unchanged
//	7         a transient failure abandons the message; it comes back and
//	          is stored
func TestSevenSteps(t *testing.T) {
	ctx := context.Background()
	bus, client := newBus(t, time.Second)
	orders := newOrders(t)
	app := NewApp(orders)
	var counter idem.Counter
	app.Observer = &counter

	// The orders the faults hit are neither reused with other content nor
	// retried by the producer: the first content to be stored wins.
	const unique, retries, reuses = 24, 8, 4
	const lost, transient, held = "O-0013", "O-0015", "O-0017"
	var (
		mu       sync.Mutex
		alerts   = map[string]broker.Report{}
		tries    = map[string]int{}
		outcomes = map[string][]idem.Outcome{}
		expired  = make(chan struct{})
		settled  = make(chan struct{}, 1)
		dropOnce sync.Once
	)
	app.Alert = func(msg *azservicebus.ReceivedMessage, r broker.Report) {
		mu.Lock()
		defer mu.Unlock()
		alerts[servicebus.MessageOf(msg).ID] = r
	}
	app.Fail = func(o Order) error {
		mu.Lock()
		tries[o.ID]++
		n := tries[o.ID]
		mu.Unlock()
		switch {
		case o.ID == transient && n <= 2:
			return errors.New("inventory service briefly unavailable")
		case o.ID == held && n == 1:
			<-expired // held past its lock, until the redelivery is handled
		case o.ID == held && n == 2:
			defer close(expired)
		}
		return nil
	}
	app.Hooks.OnError = func(err error) { t.Log(err) }
	app.Hooks.BeforeSettle = func(_ context.Context, msg *azservicebus.ReceivedMessage, r broker.Report) {
		if servicebus.MessageOf(msg).ID == lost && r.Action == idem.ActionAck {
			dropOnce.Do(bus.DropConnections) // the completion is lost: Service Bus redelivers
		}
	}
	app.Hooks.AfterSettle = func(_ context.Context, msg *azservicebus.ReceivedMessage, r broker.Report) {
		mu.Lock()
		id := servicebus.MessageOf(msg).ID
		outcomes[id] = append(outcomes[id], r.Result.Outcome)
		mu.Unlock()
		select {
		case settled <- struct{}{}:
		default:
		}
	}

	// The producer: each order once, some retried, some ids reused.
	s, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	var sent []Order
	for i := range unique {
		sent = append(sent, order(fmt.Sprintf("O-%04d", i), 1+i%3))
	}
	for i := range retries {
		sent = append(sent, sent[2*i])
	}
	var reused []string
	for i := range reuses {
		o := order(sent[2*i+1].ID, 1)
		o.Lines[0].Qty = 99
		sent = append(sent, o)
		reused = append(reused, o.ID)
	}
	for _, o := range sent {
		if err := Produce(ctx, s, o); err != nil {
			t.Fatal(err)
		}
	}
	// Producer step: duplicate detection dropped the retries, not the
	// reuses (their MessageId carries a digest of other content).
	if st, _ := bus.Stats("orders"); st.Active != unique+reuses {
		t.Fatalf("%+v: want %d active (the %d retries dropped)", st, unique+reuses, retries)
	}
	peek, err := client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	first, err := peek.PeekMessages(ctx, 1, nil)
	if err != nil || len(first) != 1 {
		t.Fatalf("peek: %v %v", first, err)
	}
	if id := first[0].ApplicationProperties[servicebus.HeaderID]; id != "O-0000" || servicebus.MessageOf(first[0]).ID != "O-0000" {
		t.Fatalf("the first message carries id %v, MessageId %s", id, first[0].MessageID)
	}
	peek.Close(ctx)

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		// No lock renewal: the held order's lock expires under its handler.
		done <- app.Consume(runCtx, client, "orders", servicebus.Options{LockRenewal: time.Hour,
			Concurrency: 4, Backoff: func(int) time.Duration { return 20 * time.Millisecond }})
	}()
	for {
		mu.Lock()
		a := len(alerts)
		lostSeen := slices.Contains(outcomes[lost], idem.OutcomeDuplicate)
		mu.Unlock()
		st, _ := bus.Stats("orders")
		ids, err := StoredOrders(ctx, orders)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) == unique && a == reuses && lostSeen && st.Active == 0 && st.Locked == 0 {
			break
		}
		select {
		case <-settled:
		case err := <-done:
			t.Fatalf("Consume returned %v with %d orders, %d alerts, queue %+v", err, len(ids), a, st)
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// The container: every order once, in its own partition, its id and
	// orderId the order id, its request hash beside it, its lines with it;
	// the reused ids kept their first content.
	for _, o := range sent[:unique] {
		docs := partition(t, orders, o.ID)
		d := docs[o.ID]
		if d == nil || d["orderId"] != o.ID || d["requestHash"] == nil || d["total"] != float64(o.Total()) || len(docs) != 1+len(o.Lines) {
			t.Fatalf("order %s: documents %v", o.ID, docs)
		}
	}
	// Steps 4-5: the redelivery of the order whose completion was lost was
	// a duplicate, completed.
	if got := outcomes[lost]; !slices.Contains(got, idem.OutcomeDuplicate) || counter.Count(idem.OutcomeDuplicate) < 1 {
		t.Fatalf("%s settled as %v; want a duplicate among them", lost, got)
	}
	// Step 6: every reuse dead-lettered as a conflict, with an alert.
	for _, id := range reused {
		if r, ok := alerts[id]; !ok || r.Reason != "conflict" || r.Result.Outcome != idem.OutcomeConflict {
			t.Fatalf("alert for %s: %+v (present %v)", id, r, ok)
		}
	}
	if st, _ := bus.Stats("orders"); st.DeadLettered != reuses {
		t.Fatalf("%+v, want %d dead letters", st, reuses)
	}
	dlq, err := client.NewReceiverForQueue("orders", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close(ctx)
	dead, err := dlq.PeekMessages(ctx, reuses, nil)
	if err != nil || len(dead) != reuses {
		t.Fatalf("dead letters: %d, %v", len(dead), err)
	}
	for _, m := range dead {
		if m.DeadLetterReason == nil || *m.DeadLetterReason != "conflict" || m.ApplicationProperties[idem.HeaderReason] != "conflict" ||
			m.ApplicationProperties[idem.HeaderDeadLetterKey] == nil || m.ApplicationProperties[idem.HeaderFingerprint] == nil || !slices.Contains(reused, servicebus.MessageOf(m).ID) {
			t.Fatalf("dead letter %s: reason %v, properties %v", m.MessageID, m.DeadLetterReason, m.ApplicationProperties)
		}
	}
	// Step 7 and PeekLock: the transient failure was abandoned twice and
	// stored on its third delivery; the held order ran twice.
	if tries[transient] < 3 || tries[held] < 2 {
		t.Fatalf("%s tried %d times (want 3 or more), %s %d (want 2 or more)", transient, tries[transient], held, tries[held])
	}
}

// TestPlainMessageIDHidesAReuse is why the producer sends through
// servicebus.Send: with MessageId set to the bare order id, as the seed
// words it, the queue's duplicate detection drops an order id reused with
// other content before any consumer sees it, and step 6 never happens.
func TestPlainMessageIDHidesAReuse(t *testing.T) {
	ctx := context.Background()
	bus, client := newBus(t, time.Minute)
	s, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []Order{order("P-1", 1), order("P-1", 3)} {
		body, _ := json.Marshal(o)
		id := o.ID
		if err := s.SendMessage(ctx, &azservicebus.Message{MessageID: &id, Body: body}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := bus.Stats("orders"); st.Active != 1 {
		t.Fatalf("%+v: want the reuse dropped unseen", st)
	}
	for _, o := range []Order{order("P-2", 1), order("P-2", 3)} {
		if err := Produce(ctx, s, o); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := bus.Stats("orders"); st.Active != 3 {
		t.Fatalf("%+v: want both P-2 messages queued (Send's MessageId carries the content's digest)", st)
	}
}

// TestOneBatch: an order and its lines are written in one transactional
// batch, all or none. An order of more lines than a batch holds is
// refused whole (dead-lettered as invalid data): neither the order nor any
// line is written, and its redelivery would meet the same refusal rather
// than a half-written order. A handler that fails before the commit
// leaves nothing either; its next delivery writes everything.
func TestOneBatch(t *testing.T) {
	ctx := context.Background()
	orders := newOrders(t)
	app := NewApp(orders)
	g, err := app.Guard("orders")
	if err != nil {
		t.Fatal(err)
	}
	h := app.Handler()
	if err := h.Check(g); err != nil {
		t.Fatal(err)
	}
	deliver := func(o Order) (idem.Result, error) {
		body, _ := json.Marshal(o)
		msg := &azservicebus.ReceivedMessage{MessageID: o.ID, Body: body}
		return h.Run(ctx, g, servicebus.MessageOf(msg), msg)
	}
	big := order("B-1", 120)
	res, err := deliver(big)
	if idem.Decide(res, err) != idem.ActionDeadLetter || !errors.Is(err, idem.ErrInvalidData) {
		t.Fatalf("an order of 120 lines: %v, %v; want dead-lettered as invalid data", res.Outcome, err)
	}
	if docs := partition(t, orders, big.ID); len(docs) != 0 {
		t.Fatalf("a refused batch wrote %d documents", len(docs))
	}

	o := order("B-2", 3)
	fail := errors.New("inventory down")
	app.Fail = func(Order) error { return fail }
	if res, err := deliver(o); !errors.Is(err, fail) || idem.Decide(res, err) != idem.ActionRetry {
		t.Fatalf("failing delivery: %v, %v", res.Outcome, err)
	}
	if docs := partition(t, orders, o.ID); len(docs) != 0 {
		t.Fatalf("a failed delivery wrote %v", docs)
	}
	app.Fail = nil
	for i, want := range []idem.Outcome{idem.OutcomeProcessed, idem.OutcomeDuplicate} {
		if res, err := deliver(o); err != nil || res.Outcome != want {
			t.Fatalf("delivery %d: %v, %v; want %v", i, res.Outcome, err, want)
		}
	}
	if docs := partition(t, orders, o.ID); len(docs) != 4 {
		t.Fatalf("documents %v, want the order and its 3 lines", docs)
	}
}
