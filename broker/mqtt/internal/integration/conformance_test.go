package integration_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/idemgo/idem/broker/brokertest"
	mqttidem "github.com/idemgo/idem/broker/mqtt"
	"github.com/idemgo/idem/internal/consumetest"
)

// TestConformance runs broker/brokertest on the machine's Mosquitto
// (sessions kept while disconnected): each subtest gets topics of its own,
// its consumers share one subscription ($share/suite/...) and each takes
// the lowest session id no running consumer holds, so a consumer started
// after a kill resumes the killed one's session. (It ran on mochi-mqtt
// in-process first: under -race, mochi 2.7.9's Inflight lock deadlocked
// in publishToClient and the package hung.)
func TestConformance(t *testing.T) {
	addr := mosquitto.Need(t)
	brokertest.Run(t, func(t *testing.T) brokertest.Broker { return newSuiteBroker(t, "mqtt://"+addr) })
}

var prefixes atomic.Int64

type suiteBroker struct {
	server string
	prefix string
	pub    *autopaho.ConnectionManager
	down   sync.WaitGroup
	// arrived gets a token for each dead letter received
	arrived chan struct{}

	mu       sync.Mutex
	dead     []brokertest.DeadLetter
	notDL    error           // what DeadLetterOf said of a message on the dead-letter topic, if it refused one
	raw      []*paho.Publish // the dead letters as received, for Replay
	replayed int             // how many of raw Replay has replayed
	running  map[int]bool    // session ids in use
}

func newSuiteBroker(t *testing.T, server string) *suiteBroker {
	b := &suiteBroker{server: server, prefix: fmt.Sprintf("idemtest/%d/%d", time.Now().UnixNano(), prefixes.Add(1)), running: map[int]bool{}, arrived: make(chan struct{}, 1<<12)}
	b.pub = dial(t, server, b.prefix+"-pub", func(pr paho.PublishReceived) (bool, error) {
		m, err := mqttidem.DeadLetterOf(pr.Packet)
		b.mu.Lock()
		if err != nil {
			b.notDL = err
		}
		b.dead = append(b.dead, brokertest.DeadLetter{ID: m.ID, Payload: m.Payload, Headers: m.Headers})
		b.raw = append(b.raw, pr.Packet)
		b.mu.Unlock()
		select {
		case b.arrived <- struct{}{}:
		default:
		}
		return true, nil
	})
	if _, err := b.pub.Subscribe(context.Background(), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: b.prefix + "/dlq", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.down.Wait)
	return b
}

// dial connects a client with a clean session, acking what it receives.
func dial(t *testing.T, server, id string, onPublish func(paho.PublishReceived) (bool, error)) *autopaho.ConnectionManager {
	t.Helper()
	u, _ := url.Parse(server)
	cfg := autopaho.ClientConfig{ServerUrls: []*url.URL{u}, CleanStartOnInitialConnection: true, KeepAlive: 20,
		ClientConfig: paho.ClientConfig{ClientID: id},
		// or mochi strips user properties from what it sends (see NewConsumer)
		ConnectPacketBuilder: func(cp *paho.Connect, _ *url.URL) (*paho.Connect, error) {
			if cp.Properties == nil {
				cp.Properties = &paho.ConnectProperties{}
			}
			cp.Properties.RequestProblemInfo = true
			return cp, nil
		}}
	if onPublish != nil {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){onPublish}
	}
	cm, err := autopaho.NewConnection(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cm.Disconnect(context.Background()) })
	if err := cm.AwaitConnection(context.Background()); err != nil {
		t.Fatal(err)
	}
	return cm
}

// Features: MQTT keeps no delivery count, and the broker never drops a
// QoS 1 message of a live session, so nothing runs into a limit; a
// message left unacked comes back only when its session reconnects (no
// redelivery timer). Concurrency handlers run at once, and retries are
// queued again in place: no order kept.
func (b *suiteBroker) Features() brokertest.Features {
	return brokertest.Features{Skip: map[string]string{
		"ConflictDeadLetterHeaders": "an MQTT message has no broker position (the packet id is a session slot, reused); the dead letter names its topic (Idem-Original-Topic) and idem's headers are checked by DeadLetterHeadersEveryReason",
	}}
}

func (b *suiteBroker) Publish(ctx context.Context, msgs ...brokertest.Message) error {
	for _, m := range msgs {
		p := publishOf(b.prefix+"/orders", m)
		var err error
		if m.ID != "" {
			_, err = mqttidem.Publish(ctx, b.pub, m.ID, p)
		} else {
			_, err = b.pub.Publish(ctx, p) // poison: Publish refuses a message without an id
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// publishOf is m as a QoS 1 PUBLISH, without its id (mqttidem.Publish
// sets it).
func publishOf(topic string, m brokertest.Message) *paho.Publish {
	props := &paho.PublishProperties{}
	for k, v := range m.Headers {
		props.User.Add(k, v)
	}
	return &paho.Publish{QoS: 1, Topic: topic, Payload: m.Payload, Properties: props}
}

func (b *suiteBroker) DeadLetters(context.Context) ([]brokertest.DeadLetter, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.notDL != nil {
		return nil, b.notDL
	}
	return append([]brokertest.DeadLetter(nil), b.dead...), nil
}

// Replay replays, with mqttidem.Replay, the dead letters received and not
// yet replayed.
func (b *suiteBroker) Replay(ctx context.Context) (int, error) {
	b.mu.Lock()
	todo := b.raw[b.replayed:]
	b.replayed = len(b.raw)
	b.mu.Unlock()
	for _, dl := range todo {
		if err := mqttidem.Replay(ctx, b.pub, dl); err != nil {
			return 0, err
		}
	}
	return len(todo), nil
}

// Start runs a consumer on the lowest session id free; Kill closes its
// connection at once and lets it connect no more.
func (b *suiteBroker) Start(ctx context.Context, sc brokertest.Consumer) (brokertest.Running, error) {
	b.mu.Lock()
	n := 1
	for b.running[n] {
		n++
	}
	b.running[n] = true
	b.mu.Unlock()
	free := func() {
		b.mu.Lock()
		delete(b.running, n)
		b.mu.Unlock()
	}
	var (
		mu     sync.Mutex
		conn   net.Conn
		killed bool
	)
	c, err := mqttidem.NewConsumer(sc.Guard, consumetest.SuiteHandler(sc, mqttidem.MessageOf), mqttidem.Options{
		Concurrency: sc.Concurrency, Backoff: consumetest.Backoff(sc), MaxDeliveries: sc.MaxDeliveries,
		Hooks:  consumetest.Hooks(sc.Hooks, mqttidem.MessageOf),
		Server: b.server, ClientID: fmt.Sprintf("%s-c%d", b.prefix, n),
		Topic: "$share/suite/" + b.prefix + "/orders", DeadLetterTopic: b.prefix + "/dlq",
		Config: func(cfg *autopaho.ClientConfig) {
			cfg.ReconnectBackoff = autopaho.NewConstantBackoff(50 * time.Millisecond)
			cfg.AttemptConnection = func(ctx context.Context, _ autopaho.ClientConfig, u *url.URL) (net.Conn, error) {
				mu.Lock()
				defer mu.Unlock()
				if killed {
					return nil, fmt.Errorf("killed")
				}
				var err error
				conn, err = (&net.Dialer{}).DialContext(ctx, "tcp", u.Host)
				return conn, err
			}
		},
	})
	if err != nil {
		free()
		return nil, err
	}
	kill := func() {
		mu.Lock()
		killed = true
		if conn != nil {
			conn.Close()
		}
		mu.Unlock()
		free()
	}
	r := consumetest.Start(&b.down, c.Run, func() error { free(); return nil }, kill)
	select {
	case <-c.Subscribed():
		return r, nil
	case <-ctx.Done():
		r.Kill()
		return nil, ctx.Err()
	}
}
