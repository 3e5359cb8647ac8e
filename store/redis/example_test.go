package redisidem_test

import (
	"context"
	"fmt"
	"log"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	redisidem "github.com/idemgo/idem/store/redis"
)

// A consumer that sends one e-mail per event, whatever the broker
// redelivers. The downstream call carries a key derived from the message's,
// so the mail service deduplicates too if Redis ever loses a record.
func Example() {
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	store, err := redisidem.New(rdb, redisidem.Options{Prefix: "idem"})
	if err != nil {
		log.Fatal(err)
	}
	g, err := idem.New(store, idem.Options{Scope: "mailer", Lease: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	msg := idem.Message{ID: "evt-42", Payload: []byte(`{"to":"ada@example.com"}`)}
	res, err := g.Do(context.Background(), msg, func(ctx context.Context) ([]byte, error) {
		sendKey := idem.DeriveKey(ctx, "send")
		return []byte("sent with key " + sendKey), nil
	})
	switch idem.Decide(res, err) {
	case idem.ActionAck:
		fmt.Println(res.Outcome) // processed, or duplicate on a redelivery
	case idem.ActionRetry:
		// Redis down or the key in progress elsewhere: nak with a delay.
	case idem.ActionDeadLetter:
		// A conflicting payload or a permanent failure.
	}
}
