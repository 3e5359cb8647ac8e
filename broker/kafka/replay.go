package kafka

import (
	"context"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Replay re-produces dl, a dead letter a Consumer wrote (read back from the
// dead-letter topic), to the topic it came from (its Idem-Original-Topic
// header), with its Kafka key and value and the original record's headers
// exactly as they were (the idempotency-key among them), and without the
// headers idem put on it when dead-lettering it (idem.DeadLetterHeaders and
// Idem-Original-*). It returns once the broker acknowledged the record.
//
// The consumer's record then decides, as for any redelivery: a key that
// was completed meanwhile (a producer re-send processed after the dead
// letter, or an operator's fix) is a duplicate, acknowledged without
// running the handler; a key never completed is processed; content that
// conflicts with the recorded key is dead-lettered again. For that the
// record must outlive the replay: keep the guard's Retention longer than
// the longest time a dead letter may wait before it is replayed.
//
// The client's partitioner places the record by its key, as it placed the
// original (Idem-Original-Partition is set as the record's Partition for
// kgo.ManualPartitioner); the broker gives it a new offset and timestamp.
// A record without Idem-Original-Topic is refused with ErrNotDeadLetter.
func Replay(ctx context.Context, cl *kgo.Client, dl *kgo.Record) error {
	rec, err := replayed(dl)
	if err != nil {
		return err
	}
	return cl.ProduceSync(ctx, rec).FirstErr()
}

// replayed is the original record a dead letter carries. DeadLetter writes
// the idem headers first, then Idem-Original-Topic, -Partition, -Offset and
// (when the record had one) -Timestamp, then the original headers: these
// are what follows the first Idem-Original-Topic and its position headers.
func replayed(dl *kgo.Record) (*kgo.Record, error) {
	hs := dl.Headers
	at := -1
	for i, h := range hs {
		if h.Key == HeaderOriginalTopic {
			at = i
			break
		}
	}
	if at < 0 || len(hs[at].Value) == 0 {
		return nil, ErrNotDeadLetter
	}
	rec := &kgo.Record{Topic: string(hs[at].Value), Key: dl.Key, Value: dl.Value}
	rest := hs[at+1:]
	for _, name := range []string{HeaderOriginalPartition, HeaderOriginalOffset, HeaderOriginalTimestamp} {
		if len(rest) == 0 || rest[0].Key != name {
			continue
		}
		if name == HeaderOriginalPartition {
			if n, err := strconv.ParseInt(string(rest[0].Value), 10, 32); err == nil {
				rec.Partition = int32(n)
			}
		}
		rest = rest[1:]
	}
	if len(rest) > 0 {
		rec.Headers = append([]kgo.RecordHeader(nil), rest...)
	}
	return rec, nil
}
