// Command servicebus-orders is the seed's worked example on Azure Service
// Bus: the producer sets MessageId from the order id (servicebus.Send:
// the id and a digest of the content, so the queue's duplicate detection
// drops producer retries but never a reused id with other content); the
// consumer receives in PeekLock and keeps the order row under the order id
// (entity mode: a conflict-free insert, no inbox table). An existing row
// with the same request hash is a duplicate (completed); another hash is a
// conflict (dead-lettered, with an alert from the OnDeadLetter hook);
// transient failures are abandoned and come back.
//
// Without SERVICEBUS_CONNECTION_STRING it runs on the in-process Service
// Bus of broker/servicebus/servicebustest; with it, on Azure (the queue
// "orders" must exist, with duplicate detection on).
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/servicebus"
	"github.com/idemgo/idem/broker/servicebus/servicebustest"
	"github.com/idemgo/idem/entity"
	"github.com/idemgo/idem/store/sqlite"
)

// Order is the message body.
type Order struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

// App is the consumer side: the orders table and the consumer's hooks.
type App struct {
	DB     *sql.DB
	Orders *entity.Table
	// Fail, when set, is asked before each insert: a non-nil error is a
	// transient failure (the message is abandoned and comes back).
	Fail func(o Order) error
	// Alert receives every dead letter (conflicts above all).
	Alert func(msg *azservicebus.ReceivedMessage, r broker.Report)
	// Hooks are passed to the consumer, beside Alert.
	Hooks broker.Hooks[*azservicebus.ReceivedMessage]
}

// OpenApp opens the SQLite database at path with the orders table.
//
// Its transactions begin DEFERRED, unlike those of store/sqlite's DSN
// (IMMEDIATE): a handler's transaction takes SQLite's single writer lock at
// its first write, the order insert, not when it begins. A handler that is
// slow before its insert (a payment call, a lock running out under it)
// thus leaves the other consumers free to store their orders, the
// redelivery of its own message included; under IMMEDIATE every other
// handler would wait for it and fail with SQLITE_BUSY. The insert is the
// transaction's first statement, so it never upgrades a read snapshot
// (which SQLite refuses with SQLITE_BUSY instead of waiting).
func OpenApp(ctx context.Context, path string) (*App, error) {
	dsn := fmt.Sprintf("%s?_txlock=deferred&_journal_mode=WAL&_synchronous=FULL&_busy_timeout=%d",
		path, sqlite.DefaultBusyTimeout.Milliseconds())
	db, err := sql.Open(sqlite.DriverName, dsn)
	if err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (
		order_id TEXT PRIMARY KEY, amount INTEGER NOT NULL, request_hash TEXT NOT NULL)`); err != nil {
		db.Close()
		return nil, err
	}
	return &App{DB: db, Orders: &entity.Table{Dialect: entity.SQLite, Name: "orders",
		KeyColumn: "order_id", FingerprintColumn: "request_hash", Scope: "orders"}}, nil
}

// Guard is the consumer's guard for queue: entity mode (idem.NewInbox over
// entity.NewStore), the order row is the only record, scoped by the queue.
func (a *App) Guard(queue string) (*idem.Guard, error) {
	return idem.NewInbox(entity.NewStore(a.DB, nil), idem.Options{Scope: servicebus.EntityPath(queue)})
}

// Handler stores one order in the guard's transaction: a conflict-free
// insert keyed by the order id, with the request hash beside it. A row
// with the same hash makes the message a duplicate, another hash a
// conflict.
func (a *App) Handler() servicebus.Handler {
	return servicebus.HandleTx(func(ctx context.Context, tx *sql.Tx, msg *azservicebus.ReceivedMessage) ([]byte, error) {
		var o Order
		if err := json.Unmarshal(msg.Body, &o); err != nil {
			return nil, idem.Permanent(fmt.Errorf("order body: %w", err))
		}
		if a.Fail != nil {
			if err := a.Fail(o); err != nil {
				return nil, err
			}
		}
		im := servicebus.MessageOf(msg)
		fp, err := idem.PayloadFingerprint(im)
		if err != nil {
			return nil, err
		}
		return nil, a.Orders.Insert(ctx, entity.SQL(tx), im.ID, fp, []string{"amount"}, []any{o.Amount})
	})
}

// Consume runs one consumer of the queue until ctx ends.
func (a *App) Consume(ctx context.Context, client *azservicebus.Client, queue string, opts servicebus.Options) error {
	g, err := a.Guard(queue)
	if err != nil {
		return err
	}
	r, err := client.NewReceiverForQueue(queue, nil) // PeekLock
	if err != nil {
		return err
	}
	defer r.Close(context.WithoutCancel(ctx))
	opts.EntityPath = queue
	opts.Hooks = a.Hooks
	opts.Hooks.OnDeadLetter = func(ctx context.Context, msg *azservicebus.ReceivedMessage, r broker.Report) {
		if a.Alert != nil {
			a.Alert(msg, r)
		}
		if a.Hooks.OnDeadLetter != nil {
			a.Hooks.OnDeadLetter(ctx, msg, r)
		}
	}
	return servicebus.Consume(ctx, r, g, a.Handler(), opts)
}

// Produce sends o with MessageId from its id (servicebus.Send).
func Produce(ctx context.Context, s *azservicebus.Sender, o Order) error {
	body, err := json.Marshal(o)
	if err != nil {
		return err
	}
	return servicebus.Send(ctx, s, o.ID, &azservicebus.Message{Body: body})
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	conn := os.Getenv("SERVICEBUS_CONNECTION_STRING")
	if conn == "" {
		srv, err := servicebustest.NewServer()
		if err != nil {
			return err
		}
		defer srv.Close()
		if err := srv.CreateQueue("orders", servicebustest.QueueOptions{RequiresDuplicateDetection: true}); err != nil {
			return err
		}
		conn = srv.ConnectionString()
		log.Printf("in-process Service Bus at %s", srv.Addr())
	}
	client, err := azservicebus.NewClientFromConnectionString(conn, nil)
	if err != nil {
		return err
	}
	defer client.Close(context.WithoutCancel(ctx))
	dir, err := os.MkdirTemp("", "servicebus-orders")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	app, err := OpenApp(ctx, filepath.Join(dir, "orders.db"))
	if err != nil {
		return err
	}
	defer app.DB.Close()
	app.Alert = func(msg *azservicebus.ReceivedMessage, r broker.Report) {
		log.Printf("ALERT: order %s dead-lettered: %s", servicebus.MessageOf(msg).ID, r.Reason)
	}
	s, err := client.NewSender("orders", nil)
	if err != nil {
		return err
	}
	for _, o := range []Order{{"A-1", 10}, {"A-1", 10}, {"A-2", 20}, {"A-2", 99}} {
		if err := Produce(ctx, s, o); err != nil {
			return err
		}
	}
	runCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := app.Consume(runCtx, client, "orders", servicebus.Options{}); err != nil {
		return err
	}
	var n int
	if err := app.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM orders`).Scan(&n); err != nil {
		return err
	}
	log.Printf("%d orders stored", n)
	return nil
}
