package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	mqttidem "github.com/idemgo/idem/broker/mqtt"
	"github.com/idemgo/idem/broker/redisstream"
	"github.com/idemgo/idem/internal/testenv"
)

// redisDLQ: a stream and its dead-letter stream on the shared Redis.
type redisDLQ struct {
	addr, stream string
	rdb          *redis.Client
}

func newRedisDLQ(t *testing.T) *redisDLQ {
	addr := testenv.Redis.Need(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	b := &redisDLQ{addr: addr, stream: "idemdlq:" + tag(), rdb: rdb}
	t.Cleanup(func() {
		rdb.Del(context.Background(), b.stream, b.stream+".dlq")
		rdb.Close()
	})
	return b
}

func (b *redisDLQ) url() string {
	return "redis://" + b.addr + "?dlq=" + url.QueryEscape(b.stream+".dlq")
}
func (b *redisDLQ) keepsReplayed() bool { return false }

// publish adds an entry as a producer does: the key in Idem-Id, the body
// in payload.
func (b *redisDLQ) publish(t *testing.T, key, body string) {
	if err := b.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: b.stream,
		Values: map[string]any{redisstream.FieldID: key, redisstream.FieldPayload: body}}).Err(); err != nil {
		t.Fatal(err)
	}
}

func (b *redisDLQ) consume(ctx context.Context, t *testing.T, store idem.Store, h func(key, body string) error, ev *dlqEvents) error {
	g, err := idem.New(store, idem.Options{Scope: "billing", KeepPayload: 1024})
	if err != nil {
		return err
	}
	c, err := redisstream.NewConsumer(b.rdb, g, broker.Handle(func(_ context.Context, m *redisstream.Message) ([]byte, error) {
		im := redisstream.MessageOf(m)
		return nil, h(im.ID, string(im.Payload))
	}), redisstream.Options{Stream: b.stream, Group: "billing", Consumer: "c1", DeadLetterStream: b.stream + ".dlq",
		Backoff: fast, Hooks: dlqHooks[*redisstream.Message](ev)})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// mqttDLQ: a topic and its dead-letter topic on the shared Mosquitto,
// and the dead-letter session idem dlq reads, created (by a first idem
// dlq list) before the consumer dead-letters anything.
type mqttDLQ struct {
	addr, id   string
	pub        *autopaho.ConnectionManager
	subscribed chan struct{} // closed once the consumer's session is subscribed
}

func newMQTTDLQ(t *testing.T) *mqttDLQ {
	addr := testenv.MQTT.Need(t)
	b := &mqttDLQ{addr: addr, id: "idemdlq-" + tag(), subscribed: make(chan struct{})}
	b.pub = mqttConnect(t, addr, b.id+"-pub")
	t.Cleanup(func() { dropMQTTSession(addr, b.id+"-dlq"); dropMQTTSession(addr, b.id+"-c1") })
	// The first read of a session that does not exist says why it lists
	// nothing, and subscribes it: dead letters from now on are kept.
	code, _, errs := runCmd(t, "dlq", "list", "--broker", b.url())
	if code != exitFailure || !strings.Contains(errs, "no MQTT dead-letter session") || !strings.Contains(errs, "subscribed to its topic when it is published") {
		t.Fatalf("idem dlq list of a new session: exit %d, want %d and why it lists nothing\n%s", code, exitFailure, errs)
	}
	return b
}

func (b *mqttDLQ) topic() string { return "idemdlq/" + b.id + "/orders" }
func (b *mqttDLQ) url() string {
	return "mqtt://" + b.addr + "?" + url.Values{"dlq": {"idemdlq/" + b.id + "/dlq"}, "client": {b.id + "-dlq"}, "wait": {"500ms"}}.Encode()
}
func (b *mqttDLQ) keepsReplayed() bool { return false }

// publish sends at QoS 1 with the key in idem-id, once the consumer's
// session is subscribed (MQTT keeps nothing for a session subscribed
// later).
func (b *mqttDLQ) publish(t *testing.T, key, body string) {
	<-b.subscribed
	props := &paho.PublishProperties{}
	props.User.Add(mqttidem.PropertyID, key)
	if _, err := b.pub.Publish(context.Background(), &paho.Publish{QoS: 1, Topic: b.topic(), Payload: []byte(body), Properties: props}); err != nil {
		t.Fatal(err)
	}
}

func (b *mqttDLQ) consume(ctx context.Context, t *testing.T, store idem.Store, h func(key, body string) error, ev *dlqEvents) error {
	g, err := idem.New(store, idem.Options{Scope: "billing", KeepPayload: 1024})
	if err != nil {
		return err
	}
	c, err := mqttidem.NewConsumer(g, broker.Handle(func(_ context.Context, m *mqttidem.Message) ([]byte, error) {
		im := mqttidem.MessageOf(m)
		return nil, h(im.ID, string(im.Payload))
	}), mqttidem.Options{Server: "mqtt://" + b.addr, ClientID: b.id + "-c1", Topic: b.topic(), DeadLetterTopic: "idemdlq/" + b.id + "/dlq",
		SessionExpiry: time.Minute, Backoff: fast, Hooks: dlqHooks[*mqttidem.Message](ev)})
	if err != nil {
		return err
	}
	go func() {
		select {
		case <-c.Subscribed():
			close(b.subscribed)
		case <-ctx.Done():
		}
	}()
	return c.Run(ctx)
}

// mqttConnect is a connection of a clean session, closed when t ends.
func mqttConnect(t *testing.T, addr, id string) *autopaho.ConnectionManager {
	t.Helper()
	u, _ := url.Parse("mqtt://" + addr)
	cm, err := autopaho.NewConnection(context.Background(), autopaho.ClientConfig{ServerUrls: []*url.URL{u}, KeepAlive: 30,
		CleanStartOnInitialConnection: true, ClientConfig: paho.ClientConfig{ClientID: id}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cm.AwaitConnection(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cm.Disconnect(context.Background()) })
	return cm
}

// dropMQTTSession ends a session the test left on the shared broker: a
// clean start with no expiry discards it.
func dropMQTTSession(addr, id string) {
	u, _ := url.Parse("mqtt://" + addr)
	cm, err := autopaho.NewConnection(context.Background(), autopaho.ClientConfig{ServerUrls: []*url.URL{u}, KeepAlive: 30,
		CleanStartOnInitialConnection: true, SessionExpiryInterval: 0, ClientConfig: paho.ClientConfig{ClientID: id}})
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if cm.AwaitConnection(ctx) == nil {
		cm.Disconnect(ctx)
	}
}

// MQTT acks a session's messages in order: replaying the second dead
// letter alone is refused, saying why, and leaves both in the session;
// replaying the first alone then works.
func TestDLQMQTTReplayInOrder(t *testing.T) {
	b := newMQTTDLQ(t)
	startDLQRun(t, b)
	dls := dlqList(t, b.url())
	if len(dls) != 2 {
		t.Fatalf("idem dlq list: %v", dls)
	}
	first, second := fmt.Sprint(dls[0]["id"]), fmt.Sprint(dls[1]["id"])
	code, out, errs := runCmd(t, "dlq", "replay", second, "--yes", "--broker", b.url())
	if code != exitFailure || !strings.Contains(errs, "acks a session's messages in order") || !strings.Contains(errs, first) {
		t.Fatalf("idem dlq replay of the second: exit %d, want %d and why\n%s%s", code, exitFailure, out, errs)
	}
	if after := dlqList(t, b.url()); len(after) != 2 || fmt.Sprint(after[0]["id"]) != first {
		t.Fatalf("after a refused replay: %v", after)
	}
	if code, out, errs := runCmd(t, "dlq", "replay", first, "--yes", "--broker", b.url()); code != exitOK || !strings.Contains(out, "Replayed 1 of 1") {
		t.Fatalf("idem dlq replay of the first: exit %d\n%s%s", code, out, errs)
	}
}
