package docs

import (
	"context"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/console"
	"github.com/idemgo/idem/idemhttp"
	"github.com/idemgo/idem/idemprom"
	"github.com/idemgo/idem/outbox"
	outboxnats "github.com/idemgo/idem/outbox/nats"
	outboxpostgres "github.com/idemgo/idem/outbox/postgres"
	"github.com/idemgo/idem/store/sqlite"
)

// The blocks of the HTTP, outbox and operations pages, compiled.

type authn struct{}

func (authn) UserID(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil }

var auth authn

func docsHTTP(store idem.Store, mux *http.ServeMux, payments http.Handler) error {
	// block: http
	mw, err := idemhttp.New(store, idemhttp.Options{
		Scope:     "payments",
		Principal: func(r *http.Request) (string, error) { return auth.UserID(r) }, // keys are per caller
		Required:  true,
	})
	mux.Handle("POST /payments", mw.Wrap(payments))
	// block end
	return err
}

type order struct{ ID string }

func docsOutbox(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, g *idem.Guard, msg idem.Message, order order, body []byte) error {
	// block: outbox
	ob, _ := outboxpostgres.New(pool, outboxpostgres.Options{}) // outbox/postgres; outbox/sqlite, outbox/mysql
	_ = ob.Migrate(ctx)
	_, err := idem.DoTx(ctx, g, msg, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		if _, err := tx.Exec(ctx, `INSERT INTO charges ...`); err != nil {
			return nil, err
		}
		return nil, ob.Enqueue(ctx, tx, outbox.Message{
			Destination: "billing.charged", OrderingKey: order.ID, Payload: body, // id derived from the inbound key
		})
	})

	pub, _ := outboxnats.New(js, outboxnats.Options{}) // outbox/kafka, outbox/nats, outbox/amqp, outbox/servicebus
	relay, _ := outbox.NewRelay(ob, pub, outbox.RelayOptions{})
	go relay.Run(ctx) // in every instance; one holds the lease
	// block end
	return err
}

func docsConsole(store *sqlite.Store, mux *http.ServeMux, authorize func(*http.Request, console.Action) (string, error)) *idem.Guard {
	// block: console
	exp, _ := idemprom.New(idemprom.Options{Store: store})
	rec := console.NewRecorder(console.RecorderOptions{})
	g, _ := idem.New(store, idem.Options{Scope: "billing", Observer: idem.Observers(rec, exp.Observer())})
	mux.Handle("/idem/", console.New(store, console.Options{Recorder: rec, Authorize: authorize})) // no Authorize: read-only
	mux.Handle("/metrics", exp)
	// block end
	return g
}

var _ = []any{docsHTTP, docsOutbox, docsConsole}
