package integration_test

import (
	"context"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/brokertest"
	mqttidem "github.com/idemgo/idem/broker/mqtt"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/store/memory"
)

// mosquitto is the machine's broker; IDEM_MQTT_ADDR overrides its address.
var mosquitto = testenv.MQTT

// TestMosquittoRedelivery: on Mosquitto, a consumer killed while handling
// a message leaves it unacked in its session; the next consumer on the
// same ClientID gets it again with dup set and applies it, once; a reuse
// of its id with other content is dead-lettered as a conflict, with
// idem's headers as user properties.
func TestMosquittoRedelivery(t *testing.T) {
	b := newSuiteBroker(t, "mqtt://"+mosquitto.Need(t))
	ctx := context.Background()
	g, err := idem.New(memory.New(), idem.Options{Scope: "mosquitto/smoke"})
	if err != nil {
		t.Fatal(err)
	}
	var first brokertest.Running
	killed := make(chan struct{})
	started := make(chan struct{})
	first, err = b.Start(ctx, brokertest.Consumer{Guard: g, Handle: func(ctx context.Context, m idem.Message) ([]byte, error) {
		<-started
		first.Kill()
		close(killed)
		<-ctx.Done()
		return nil, ctx.Err()
	}})
	if err != nil {
		t.Fatal(err)
	}
	close(started)
	if err := b.Publish(ctx, brokertest.Message{ID: "smoke-1", Payload: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	<-killed
	settled := make(chan broker.Report, 4)
	applied := make(chan string, 4)
	second, err := b.Start(ctx, brokertest.Consumer{Guard: g,
		Handle: func(ctx context.Context, m idem.Message) ([]byte, error) { applied <- m.ID; return nil, nil },
		Hooks:  broker.Hooks[idem.Message]{AfterSettle: func(_ context.Context, m idem.Message, r broker.Report) { settled <- r }},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Stop()
	if r := <-settled; r.Action != idem.ActionAck || r.Err != nil {
		t.Fatalf("redelivery: %+v, want acked", r)
	}
	if id := <-applied; id != "smoke-1" {
		t.Fatalf("applied %q", id)
	}
	if err := b.Publish(ctx, brokertest.Message{ID: "smoke-1", Payload: []byte("other")}); err != nil {
		t.Fatal(err)
	}
	if r := <-settled; r.Action != idem.ActionDeadLetter {
		t.Fatalf("reuse with other content: %+v, want dead-lettered", r)
	}
	<-b.arrived
	dls, _ := b.DeadLetters(ctx)
	if dls[0].ID != "smoke-1" || dls[0].Reason() != "conflict" || dls[0].Header(mqttidem.PropertyTopic) == "" {
		t.Fatalf("dead letter %+v", dls[0])
	}
	if len(applied) != 0 {
		t.Fatalf("applied twice: %q", <-applied)
	}
}
