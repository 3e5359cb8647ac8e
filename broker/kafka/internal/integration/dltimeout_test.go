package integration_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/kafka"
)

// A dead letter whose producer cannot reach any broker fails after
// DeadLetterTimeout, is reported as a *kafka.DeadLetterError and tried
// again; the record is not committed, and Run returns when its context
// ends instead of waiting on the produce forever.
func TestDeadLetterProduceBounded(t *testing.T) {
	e := newEnv(t, "dltimeout", 1)
	g, _ := newGuard(t, e, nil)
	// A producer whose only seed is a port nothing listens on.
	dead, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.RetryTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dead.Close)
	var dlErrs atomic.Int32
	h := kafka.Handle(func(context.Context, *kgo.Record) ([]byte, error) {
		return nil, idem.Permanent(errors.New("refused"))
	})
	r := runOn(t, e.consumerClient(), g, h, kafka.Options{Backoff: idem.ExponentialBackoff(10*time.Millisecond, 10*time.Millisecond), Hooks: broker.Hooks[*kgo.Record]{OnError: func(err error) {
		var dle *kafka.DeadLetterError
		if errors.As(err, &dle) {
			dlErrs.Add(1)
		}
	}}, DeadLetterTopic: e.dlq, Producer: dead, DeadLetterTimeout: 100 * time.Millisecond,
	})
	e.produce(&kgo.Record{Topic: e.topic, Value: []byte("x"), Headers: []kgo.RecordHeader{{Key: kafka.DefaultKeyHeader, Value: []byte("k1")}}})
	eventually(t, "two failed dead-letter produces reported", func() bool { return dlErrs.Load() >= 2 })
	r.stop(func(err error) bool { return err == nil || errors.Is(err, context.Canceled) })
	if c := e.committed()[0]; c > 0 {
		t.Fatalf("committed offset %d past a record whose dead letter was never produced", c)
	}
}
