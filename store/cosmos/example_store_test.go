package cosmos_test

import (
	"context"
	"fmt"
	"log"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/cosmos"
	"github.com/idemgo/idem/store/cosmos/cosmostest"
)

// The records store, two-phase: New on an azcosmos client (on Azure,
// azcosmos.NewClient or NewClientWithKey with the account's endpoint;
// here the in-process cosmostest account), Migrate for the database and
// the container, then a guard.
func Example() {
	ctx := context.Background()
	srv, err := cosmostest.NewServer(cosmostest.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	client, err := srv.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	store, err := cosmos.New(client, cosmos.Options{}) // database idem, container idem_records
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	g, err := idem.New(store, idem.Options{Scope: "mailer"})
	if err != nil {
		log.Fatal(err)
	}
	for range 2 {
		res, err := g.Do(ctx, idem.Message{ID: "evt-1", Payload: []byte(`{"to":"ada@example.com"}`)}, func(ctx context.Context) ([]byte, error) {
			return []byte("sent with key " + idem.DeriveKey(ctx, "send")), nil
		})
		fmt.Println(res.Outcome, idem.Decide(res, err))
	}
	// Output:
	// processed ack
	// duplicate ack
}
