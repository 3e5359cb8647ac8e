package integration_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/broker/kafka"
)

// TestClientOptionsWithoutConsumer: a client built with ClientOptions on
// which no Consumer is built is assigned its partitions and, instead of
// waiting for ever for a Consumer (its polls then returning nothing, for
// ever), its polls report ErrNoConsumer in a kgo.ErrGroupSession. A
// Consumer built on it afterwards takes over and consumes everything. The
// error comes kafka.ConsumerWait (5 s) after the assignment.
func TestClientOptionsWithoutConsumer(t *testing.T) {
	e := newEnv(t, "noconsumer", 2)
	recs := make([]*kgo.Record, 20)
	for n := range recs {
		recs[n] = kafka.Record(e.topic, "", fmt.Sprintf("id-%d", n), payload(int32(n%2), n))
		recs[n].Partition = int32(n % 2)
	}
	e.produce(recs...)
	cl := e.consumerClient()

	// A bound on the test, not a timing assertion: the error comes
	// ConsumerWait after the group is joined, long before.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got error
	for got == nil && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		if n := fs.NumRecords(); n > 0 {
			t.Errorf("%d records fetched before any Consumer", n)
		}
		for _, fe := range fs.Errors() {
			if !errors.Is(fe.Err, context.DeadlineExceeded) {
				got = fe.Err
			}
		}
		cl.AllowRebalance()
	}
	var session *kgo.ErrGroupSession
	if !errors.Is(got, kafka.ErrNoConsumer) || !errors.Is(got, kafka.ErrClientConfig) || !errors.As(got, &session) {
		cl.Close()
		t.Fatalf("poll error %v, want kafka.ErrNoConsumer (and ErrClientConfig) in a *kgo.ErrGroupSession", got)
	}

	g, _ := newGuard(t, e, nil)
	noop := kafka.Handle(func(context.Context, *kgo.Record) ([]byte, error) { return nil, nil })
	r := runOn(t, cl, g, noop, kafka.Options{DeadLetterTopic: e.dlq, CommitInterval: 20 * time.Millisecond})
	e.waitCommitted(t)
	r.stop(nil)
}
