package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/servicebus"
	"github.com/idemgo/idem/broker/servicebus/servicebustest"
)

func openApp(t *testing.T) *App {
	t.Helper()
	app, err := OpenApp(context.Background(), filepath.Join(t.TempDir(), "orders.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.DB.Close() })
	return app
}

func received(t *testing.T, o Order) *azservicebus.ReceivedMessage {
	t.Helper()
	body, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return &azservicebus.ReceivedMessage{MessageID: o.ID, Body: body}
}

func countRows(t *testing.T, app *App, where string) int {
	t.Helper()
	var n int
	if err := app.DB.QueryRow(`SELECT COUNT(*) FROM orders ` + where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestHeldHandlerLeavesTheWriterFree: a delivery whose handler is held
// before its insert (its lock runs out under it) holds no SQLite write
// lock, so another order and the redelivery of its own are stored
// meanwhile; when it resumes, its insert finds the redelivery's row and is
// a duplicate. With transactions that begin IMMEDIATE the held handler
// holds the writer lock from its start: the others wait out the busy
// timeout and fail with SQLITE_BUSY, and the redelivery the held one
// waits for never commits.
func TestHeldHandlerLeavesTheWriterFree(t *testing.T) {
	ctx := context.Background()
	app := openApp(t)
	g, err := app.Guard("orders")
	if err != nil {
		t.Fatal(err)
	}
	h := app.Handler()
	if err := h.Check(g); err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	unhold := sync.OnceFunc(func() { close(release) })
	defer unhold()
	var first atomic.Bool
	app.Fail = func(o Order) error {
		if o.ID == "O-1" && first.CompareAndSwap(false, true) {
			close(held)
			<-release
		}
		return nil
	}
	run := func(o Order) (idem.Result, error) {
		msg := received(t, o)
		return h.Run(ctx, g, servicebus.MessageOf(msg), msg)
	}
	type outcome struct {
		res idem.Result
		err error
	}
	heldDone := make(chan outcome, 1)
	go func() {
		res, err := run(Order{ID: "O-1", Amount: 10})
		heldDone <- outcome{res, err}
	}()
	<-held
	for _, o := range []Order{{ID: "O-2", Amount: 20}, {ID: "O-1", Amount: 10}} {
		if res, err := run(o); err != nil || res.Outcome != idem.OutcomeProcessed {
			t.Fatalf("%s while O-1's first delivery is held: %s, %v", o.ID, res.Outcome, err)
		}
	}
	unhold()
	if r := <-heldDone; r.err != nil || r.res.Outcome != idem.OutcomeDuplicate {
		t.Fatalf("O-1's held delivery: %s, %v; want a duplicate", r.res.Outcome, r.err)
	}
	if n := countRows(t, app, ""); n != 2 {
		t.Fatalf("%d rows, want 2", n)
	}
}

// TestOrders: 60 orders, 15 producer retries (dropped by duplicate
// detection), 6 ids reused with other content (dead-lettered as
// conflicts, one alert each), one order failing twice (abandoned, then
// stored), one whose lock expires mid-handler (its first handler runs on
// while Service Bus redelivers it; the loser's insert is a duplicate and
// the first delivery's complete is lost), and one whose complete is lost
// with the connection (every connection dropped just before it is sent):
// exactly 60 rows, 6 alerts, 6 dead letters.
func TestOrders(t *testing.T) {
	ctx := context.Background()
	srv, err := servicebustest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.CreateQueue("orders", servicebustest.QueueOptions{RequiresDuplicateDetection: true, LockDuration: time.Second}); err != nil {
		t.Fatal(err)
	}
	client, err := azservicebus.NewClientFromConnectionString(srv.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	app := openApp(t)

	// The orders the faults hit are neither reused with other content nor
	// retried by the producer: the first content to be stored wins, and a
	// reuse stored while its original is held would make the original the
	// conflict.
	const dropped, transient, held = "O-0033", "O-0040", "O-0041"
	var (
		mu       sync.Mutex
		alerts   = map[string]string{}
		tries    = map[string]int{}
		expired  = make(chan struct{})
		lost     = make(chan broker.Report, 1)
		settled  = make(chan struct{}, 1)
		dropOnce sync.Once
	)
	app.Alert = func(msg *azservicebus.ReceivedMessage, r broker.Report) {
		mu.Lock()
		defer mu.Unlock()
		alerts[servicebus.MessageOf(msg).ID] = r.Reason
	}
	app.Fail = func(o Order) error {
		mu.Lock()
		tries[o.ID]++
		n := tries[o.ID]
		mu.Unlock()
		switch {
		case o.ID == transient && n <= 2:
			return errors.New("payment service briefly unavailable")
		case o.ID == held && n == 1:
			<-expired // held past its lock, until the redelivery is handled
		case o.ID == held && n == 2:
			defer close(expired)
		}
		return nil
	}
	app.Hooks.OnError = func(err error) { t.Log(err) }
	app.Hooks.BeforeSettle = func(_ context.Context, msg *azservicebus.ReceivedMessage, r broker.Report) {
		if servicebus.MessageOf(msg).ID == dropped && r.Action == idem.ActionAck {
			dropOnce.Do(srv.DropConnections)
		}
	}
	app.Hooks.AfterSettle = func(_ context.Context, msg *azservicebus.ReceivedMessage, r broker.Report) {
		if servicebus.MessageOf(msg).ID == held && r.BrokerErr != nil {
			select {
			case lost <- r:
			default:
			}
		}
		select {
		case settled <- struct{}{}:
		default:
		}
	}
	s, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	const unique, retries, reuses = 60, 15, 6
	var orders []Order
	for i := range unique {
		orders = append(orders, Order{ID: fmt.Sprintf("O-%04d", i), Amount: 10 + i})
	}
	for i := range retries {
		orders = append(orders, orders[2*i])
	}
	for i := range reuses {
		orders = append(orders, Order{ID: orders[2*i+1].ID, Amount: 999})
	}
	for _, o := range orders {
		if err := Produce(ctx, s, o); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := srv.Stats("orders"); st.Active != unique+reuses {
		t.Fatalf("%+v: want %d (the retries dropped by duplicate detection)", st, unique+reuses)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		// No lock renewal: the held order's lock expires under its handler.
		done <- app.Consume(runCtx, client, "orders", servicebus.Options{LockRenewal: time.Hour, Concurrency: 4,
			Backoff: func(int) time.Duration { return 20 * time.Millisecond }})
	}()
	var r broker.Report
	select {
	case r = <-lost:
	case err := <-done:
		t.Fatalf("Run returned %v before %s's first delivery settled", err, held)
	}
	if r.Result.Outcome != idem.OutcomeProcessed && r.Result.Outcome != idem.OutcomeDuplicate {
		t.Fatalf("%s's first delivery: %s (%v), settle error %v", held, r.Result.Outcome, r.Err, r.BrokerErr)
	}
	t.Logf("%s's first delivery: %s, settle error %v", held, r.Result.Outcome, r.BrokerErr)
	for {
		mu.Lock()
		a := len(alerts)
		mu.Unlock()
		st, _ := srv.Stats("orders")
		if countRows(t, app, "") == unique && a == reuses && st.Active == 0 && st.Locked == 0 {
			break
		}
		select {
		case <-settled:
		case err := <-done:
			t.Fatalf("Run returned %v with %d rows, %d alerts, queue %+v", err, countRows(t, app, ""), a, st)
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, app, "WHERE amount = 999"); n != 0 {
		t.Fatalf("%d reused ids overwrote their order", n)
	}
	for id, reason := range alerts {
		if reason != "conflict" {
			t.Fatalf("alert for %s: %s", id, reason)
		}
	}
	if st, _ := srv.Stats("orders"); st.DeadLettered != reuses {
		t.Fatalf("%+v, want %d dead letters", st, reuses)
	}
	// More tries than the faults need: a delivery whose settlement the
	// dropped connection lost came back.
	if tries[transient] < 3 || tries[held] < 2 {
		t.Fatalf("%s tried %d times (want 3 or more), %s %d (want 2 or more)", transient, tries[transient], held, tries[held])
	}
}
