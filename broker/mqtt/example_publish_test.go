package mqttidem_test

import (
	"context"
	"log"
	"net/url"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/idemgo/idem"
	mqttidem "github.com/idemgo/idem/broker/mqtt"
)

// connect is the producer's connection: an autopaho connection manager.
func connect(ctx context.Context, clientID string, onMessage func(paho.PublishReceived) (bool, error)) *autopaho.ConnectionManager {
	u, err := url.Parse("mqtt://127.0.0.1:1883")
	if err != nil {
		log.Fatal(err)
	}
	cfg := autopaho.ClientConfig{ServerUrls: []*url.URL{u}, KeepAlive: 20, ClientConfig: paho.ClientConfig{ClientID: clientID}}
	if onMessage != nil {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){onMessage}
	}
	cm, err := autopaho.NewConnection(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	if err := cm.AwaitConnection(ctx); err != nil {
		log.Fatal(err)
	}
	return cm
}

// The producer: the reading's id in the idem-id user property, QoS 1 at
// least (the consumers' key; MQTT's packet id is the session's, not the
// message's).
func ExamplePublish() {
	ctx := context.Background()
	cm := connect(ctx, "sensor-7", nil)
	_, err := mqttidem.Publish(ctx, cm, "reading-7-1042", &paho.Publish{Topic: "sensors/7/readings", Payload: []byte(`{"t":21.5}`)})
	if err != nil {
		log.Fatal(err)
	}
}

// An operator's replay: a connection subscribed to the dead-letter topic
// (through a persistent session of its own, as idem dlq does, so dead
// letters published while it was away wait for it) publishes each dead
// letter back to its topic.
func ExampleReplay() {
	ctx := context.Background()
	var cm *autopaho.ConnectionManager
	cm = connect(ctx, "dlq-replayer", func(pr paho.PublishReceived) (bool, error) {
		msg, err := mqttidem.DeadLetterOf(pr.Packet)
		if err != nil {
			return true, nil // not one of idem's dead letters
		}
		log.Printf("replaying %s (%s)", msg.ID, msg.Headers[idem.HeaderReason])
		return true, mqttidem.Replay(ctx, cm, pr.Packet)
	})
	if _, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "dlq/sensors", QoS: 1}}}); err != nil {
		log.Fatal(err)
	}
	<-ctx.Done()
}
