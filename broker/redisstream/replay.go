package redisstream

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem/broker"
)

// Replay puts a dead letter, an entry of deadLetterStream, back on the
// stream it came from (its Idem-Original-Stream field) with its own
// fields, without idem's dead-letter fields and its position, and deletes
// it from the dead-letter stream, in one MULTI. The consumer's record then
// decides as for any redelivery: applied if it never was, acked as a
// duplicate if its key was completed meanwhile, dead-lettered again if it
// conflicts. An entry without Idem-Original-Stream is refused with an
// error wrapping ErrNotDeadLetter.
func Replay(ctx context.Context, rdb redis.UniversalClient, deadLetterStream string, dl redis.XMessage) error {
	stream, _ := dl.Values[FieldStream].(string)
	if stream == "" {
		return fmt.Errorf("redisstream: replay %s: %w", dl.ID, ErrNotDeadLetter)
	}
	vals := make(map[string]any, len(dl.Values))
	for k, v := range dl.Values {
		switch {
		case broker.IsDeadLetterHeader(k), k == FieldStream, k == FieldPosition, k == FieldGroup, k == FieldDeliveries:
		default:
			vals[k] = v
		}
	}
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: vals})
		p.XDel(ctx, deadLetterStream, dl.ID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisstream: replay %s to %s: %w", dl.ID, stream, err)
	}
	return nil
}
