package demo

import (
	"context"
	"fmt"
	"iter"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	mqttidem "github.com/idemgo/idem/broker/mqtt"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
)

// MQTT is MQTT v5 on the user's broker (Config.Broker, mqtt:// or
// mqtts://): a topic of the run with a shared subscription per side, whose
// members are persistent sessions, one per consumer slot, and a
// dead-letter topic. MQTT redelivers an unacked message only when its
// session connects again: a crashed consumer's slot is taken by the next
// consumer that starts, which gets them; a retry is held in the consumer
// and handed to it again after the delay; a lost ack stays with the live
// consumer, so it is injected as a crash.
var MQTT = &Broker{name: "mqtt", url: true, start: func(ctx context.Context, cfg Config, runID string) (transport, error) {
	return startMQTT(ctx, cfg, runID)
}}

type mqttBroker struct {
	server      *url.URL
	label       string
	topic, dlq  string
	pub         *autopaho.ConnectionManager
	slots       map[string]chan string // group → free session ids
	user        string
	password    []byte
	sessionsAll []string
}

// mqttSessionExpiry keeps a crashed slot's session (and its unacked
// messages) until another consumer takes it.
const mqttSessionExpiry = 3600

func startMQTT(ctx context.Context, cfg Config, runID string) (_ *mqttBroker, err error) {
	u, err := url.Parse(cfg.Broker)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrConfig, dsn.Redact(cfg.Broker), err)
	}
	b := &mqttBroker{label: "MQTT at " + dsn.Redact(cfg.Broker), topic: "idem-demo/" + runID + "/orders", dlq: "idem-demo/" + runID + "/dlq",
		slots: map[string]chan string{}}
	if u.User != nil {
		b.user = u.User.Username()
		p, _ := u.User.Password()
		b.password = []byte(p)
	}
	server := *u
	server.User, server.RawQuery = nil, ""
	b.server = &server
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	if b.pub, _, err = b.connect(ctx, "idem-demo-"+runID+"-producer", true, nil); err != nil {
		return nil, err
	}
	// Every slot's session is subscribed before the first publish: a
	// shared subscription shares only what comes once its members are
	// there, and queues a member's share while it is away.
	for _, group := range []string{"idem", "naive"} {
		b.slots[group] = make(chan string, cfg.Consumers)
		for i := range cfg.Consumers {
			id := fmt.Sprintf("idem-demo-%s-%s-%d", runID, group, i)
			cm, _, err := b.connect(ctx, id, true, nil)
			if err != nil {
				return nil, err
			}
			b.sessionsAll = append(b.sessionsAll, id)
			err = b.subscribe(ctx, cm, group)
			disconnect(cm)
			if err != nil {
				return nil, err
			}
			b.slots[group] <- id
		}
	}
	return b, nil
}

// connect opens a connection of session id (clean: a new session), with
// manual acks and received messages handed to recv.
func (b *mqttBroker) connect(ctx context.Context, id string, clean bool, recv func(paho.PublishReceived) (bool, error)) (*autopaho.ConnectionManager, <-chan struct{}, error) {
	down := make(chan struct{})
	var once sync.Once
	cfg := autopaho.ClientConfig{
		ServerUrls: []*url.URL{b.server}, KeepAlive: 30, ConnectTimeout: 5 * time.Second,
		CleanStartOnInitialConnection: clean, SessionExpiryInterval: mqttSessionExpiry,
		ConnectUsername: b.user, ConnectPassword: b.password,
		// A dropped connection is the consumer's end: the worker starts
		// another on a free slot.
		OnConnectionDown: func() bool { once.Do(func() { close(down) }); return false },
		ClientConfig:     paho.ClientConfig{ClientID: id, EnableManualAcknowledgment: true, SendAcksInterval: 10 * time.Millisecond},
	}
	if recv != nil {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){recv}
	}
	cm, err := autopaho.NewConnection(context.WithoutCancel(ctx), cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrBroker, b.label, err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := cm.AwaitConnection(cctx); err != nil {
		disconnect(cm)
		if strings.Contains(strings.ToLower(fmt.Sprint(err)), "not authorized") || strings.Contains(strings.ToLower(fmt.Sprint(err)), "bad user name") {
			return nil, nil, fmt.Errorf("%w: %s: %v (check the user and password in the URL)", ErrBrokerAuth, b.label, err)
		}
		return nil, nil, fmt.Errorf("%w: no MQTT broker answers at %s: %v (is it running?)", ErrBroker, b.label, err)
	}
	return cm, down, nil
}

func (b *mqttBroker) subscribe(ctx context.Context, cm *autopaho.ConnectionManager, group string) error {
	_, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "$share/" + group + "/" + b.topic, QoS: 1}}})
	if err != nil {
		return fmt.Errorf("%w: subscribe %s: %v", ErrBroker, b.topic, err)
	}
	return nil
}

func disconnect(cm *autopaho.ConnectionManager) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = cm.Disconnect(ctx)
}

func (b *mqttBroker) name() string { return b.label }

// lostAckCrashes: an unacked message stays with its live session; only a
// new connection of the session gets it again.
func (b *mqttBroker) lostAckCrashes() bool { return true }

// close ends the producer's connection and discards every session of the
// run (a clean start that does not outlive its connection).
func (b *mqttBroker) close() {
	if b.pub != nil {
		disconnect(b.pub)
	}
	for _, id := range b.sessionsAll {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cfg := autopaho.ClientConfig{ServerUrls: []*url.URL{b.server}, KeepAlive: 30, CleanStartOnInitialConnection: true,
			ConnectUsername: b.user, ConnectPassword: b.password, ClientConfig: paho.ClientConfig{ClientID: id}}
		if cm, err := autopaho.NewConnection(ctx, cfg); err == nil {
			if cm.AwaitConnection(ctx) == nil {
				_ = cm.Disconnect(ctx)
			}
		}
		cancel()
	}
}

func (b *mqttBroker) publish(ctx context.Context, m message, seq uint64) error {
	props := &paho.PublishProperties{ContentType: "application/json"}
	props.User.Add(mqttidem.PropertyID, m.Order.ID).Add(orderHeader, m.Order.ID).Add(seqHeader, strconv.FormatUint(seq, 10))
	if _, err := b.pub.Publish(ctx, &paho.Publish{QoS: 1, Topic: b.topic, Payload: m.payload(), Properties: props}); err != nil {
		return fmt.Errorf("%w: publish %s: %v", ErrBroker, m.Order.ID, err)
	}
	return nil
}

// open takes a free slot of the group and connects its session: the
// messages a crashed consumer of the slot left unacked come first.
func (b *mqttBroker) open(ctx context.Context, group string) (session, error) {
	var id string
	select {
	case id = <-b.slots[group]:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s := &mqttSession{b: b, id: id, group: group, in: make(chan paho.PublishReceived, 64), gone: make(chan struct{})}
	cm, down, err := b.connect(ctx, id, false, func(pr paho.PublishReceived) (bool, error) {
		if pr.Packet.QoS == 0 {
			return false, nil
		}
		select {
		case s.in <- pr:
		case <-s.gone: // closing: left unacked, for the slot's next connection
		}
		return true, nil
	})
	if err != nil {
		b.slots[group] <- id
		return nil, err
	}
	s.cm, s.down = cm, down
	if err := b.subscribe(ctx, cm, group); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

type mqttSession struct {
	b         *mqttBroker
	id, group string
	cm        *autopaho.ConnectionManager
	down      <-chan struct{}
	in        chan paho.PublishReceived
	gone      chan struct{}   // closed by close: paho's callback stops waiting on in
	retries   []*mqttDelivery // handed back by retry, in order
	closeOnce sync.Once
}

// fetch yields the retries handed back, then what arrives, until nothing
// does for 250ms or the connection drops.
func (s *mqttSession) fetch(ctx context.Context) iter.Seq[delivery] {
	return func(yield func(delivery) bool) {
		for len(s.retries) > 0 {
			d := s.retries[0]
			s.retries = s.retries[1:]
			if !yield(d) {
				return
			}
		}
		idle := time.NewTimer(250 * time.Millisecond)
		defer idle.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.down:
				sleep(ctx, 50*time.Millisecond)
				return
			case <-idle.C:
				return
			case pr := <-s.in:
				if !yield(&mqttDelivery{s: s, pr: pr, ctx: ctx}) {
					return
				}
				idle.Reset(250 * time.Millisecond)
			}
		}
	}
}

// close disconnects without acking what the session holds: the broker
// keeps it for the slot's next connection, as for a process that died.
func (s *mqttSession) close() {
	s.closeOnce.Do(func() {
		close(s.gone)
		disconnect(s.cm)
		s.b.slots[s.group] <- s.id
	})
}

type mqttDelivery struct {
	s   *mqttSession
	pr  paho.PublishReceived
	ctx context.Context
}

func (d *mqttDelivery) prop(name string) string {
	if d.pr.Packet.Properties == nil {
		return ""
	}
	return d.pr.Packet.Properties.User.Get(name)
}

func (d *mqttDelivery) seq() uint64  { return seqOf(d.prop(seqHeader)) }
func (d *mqttDelivery) data() []byte { return d.pr.Packet.Payload }
func (d *mqttDelivery) key() string  { return d.prop(orderHeader) }

// ack releases the PUBACK, which paho sends once every earlier message of
// the connection is acked (MQTT acks in order).
func (d *mqttDelivery) ack(context.Context) error { return d.pr.Client.Ack(d.pr.Packet) }

// retry holds the message for delay and hands it to the session again:
// MQTT has no nack, and the broker redelivers only on a new connection.
func (d *mqttDelivery) retry(delay time.Duration) {
	sleep(d.ctx, delay)
	d.s.retries = append(d.s.retries, d)
}

func (d *mqttDelivery) deadLetter(ctx context.Context, reason string, cause error) error {
	props := &paho.PublishProperties{ContentType: "application/json"}
	if p := d.pr.Packet.Properties; p != nil {
		for _, u := range p.User {
			props.User.Add(u.Key, u.Value)
		}
	}
	props.User.Add("Idem-Reason", reason).Add("Idem-Error", strings.ReplaceAll(cause.Error(), "\n", " "))
	if _, err := d.s.cm.Publish(ctx, &paho.Publish{QoS: 1, Topic: d.s.b.dlq, Payload: d.pr.Packet.Payload, Properties: props}); err != nil {
		return err
	}
	return d.ack(ctx)
}
