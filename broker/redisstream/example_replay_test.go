package redisstream_test

import (
	"context"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/redisstream"
)

// An operator's replay: read the dead-letter stream, look at each dead
// letter's reason, and put the chosen ones back on their stream (Replay
// XADDs it and deletes the dead letter, in one MULTI). The consumer's
// record then decides, as for any redelivery.
func ExampleReplay() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	dead, err := rdb.XRangeN(ctx, "orders.dlq", "-", "+", 100).Result()
	if err != nil {
		log.Fatal(err)
	}
	for _, dl := range dead {
		msg, err := redisstream.DeadLetterOf(dl)
		if err != nil {
			continue // not one of idem's dead letters
		}
		if msg.Headers[idem.HeaderReason] != "max_deliver" {
			continue // a conflict needs a decision first (idem dlq show)
		}
		if err := redisstream.Replay(ctx, rdb, "orders.dlq", dl); err != nil {
			log.Printf("%s not replayed: %v", msg.ID, err)
		}
	}
}
