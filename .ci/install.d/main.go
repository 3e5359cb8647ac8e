// Command consumer is what a new user writes first: a JetStream consumer
// whose dedup marker is kept in PostgreSQL. .ci/install builds it in a module
// of its own, against idem fetched from a module proxy, to prove the
// published modules resolve without a replace. It is compiled, not run.
package main

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/store/postgres"
)

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	store, err := postgres.New(pool, postgres.Options{})
	if err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect(os.Getenv("NATS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	cons, err := js.Consumer(ctx, "ORDERS", "billing")
	if err != nil {
		log.Fatal(err)
	}
	g, err := natsidem.NewGuard(store, cons, idem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	c, err := natsidem.NewConsumer(cons, g, natsidem.Handle(func(ctx context.Context, msg jetstream.Msg) ([]byte, error) {
		log.Printf("order %s", msg.Data())
		return nil, nil
	}), natsidem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(c.Run(ctx))
}
