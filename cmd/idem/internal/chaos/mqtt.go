package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	mqttidem "github.com/idemgo/idem/broker/mqtt"
)

// MQTT: the broker is a mosquitto of the harness's own (StartMosquitto: a
// private port and persistence directory, saved every 1-2 s and on
// shutdown; restarted with SIGTERM). Each pass has a work topic read
// through a shared subscription by the consumer processes, each on a
// persistent session whose ClientID is its slot's, so that a restarted
// consumer resumes its killed predecessor's unacked messages, and a
// dead-letter topic that a persistent session of the harness reads.

// mqttGroup is the shared subscription's group of every pass (each pass
// has its own topics).
const mqttGroup = "billing"

// mqttSession is the session expiry of the harness's clients: longer than
// any run.
const mqttSession = time.Hour

// StartMosquitto runs mosquitto on a private port with persistence in its
// private directory, saved every 1-2 s and on a clean shutdown. Restart
// stops it with SIGTERM, not SIGKILL: Mosquitto writes its persistence file
// only periodically, so a SIGKILL loses the QoS 1 messages it acknowledged
// since the last save, which is the broker's loss and not the one this
// harness measures (a 1000-order run with three SIGKILL restarts stalled
// with a third of its messages never settled).
func StartMosquitto(ctx context.Context) (Server, error) {
	return startProc(ctx, "mosquitto", "mqtt", syscall.SIGTERM, "apt-get install mosquitto, or pass --broker mqtt://...",
		func(dir, port string) []string {
			conf := filepath.Join(dir, "mosquitto.conf")
			os.WriteFile(conf, []byte(fmt.Sprintf("listener %s 127.0.0.1\nallow_anonymous true\nuser root\n"+
				"persistence true\npersistence_location %s/\nautosave_interval 1\n"+
				"max_inflight_messages 0\nmax_queued_messages 0\n", port, dir)), 0o644)
			return []string{"-c", conf}
		})
}

// dialMQTT connects a client of the harness under id (a persistent
// session) and waits for the connection; sub, when set, is subscribed at
// QoS 1 before it returns.
func dialMQTT(ctx context.Context, server, id, sub string, onPublish func(paho.PublishReceived) (bool, error)) (*autopaho.ConnectionManager, error) {
	u, err := url.Parse(server)
	if err != nil {
		return nil, err
	}
	cfg := autopaho.ClientConfig{ServerUrls: []*url.URL{u}, KeepAlive: 20, SessionExpiryInterval: uint32(mqttSession / time.Second),
		ReconnectBackoff: autopaho.NewConstantBackoff(200 * time.Millisecond),
		ClientConfig:     paho.ClientConfig{ClientID: id}}
	if onPublish != nil {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){onPublish}
	}
	cm, err := autopaho.NewConnection(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err = cm.AwaitConnection(cctx); err == nil && sub != "" {
		_, err = cm.Subscribe(cctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: sub, QoS: 1}}})
	}
	if err != nil {
		cm.Disconnect(context.Background())
		return nil, fmt.Errorf("chaos: MQTT at %s: %w", server, err)
	}
	return cm, nil
}

type mqttBus struct {
	cfg                Config
	e                  *env
	naive              bool
	topic, dlq, counts string
	maxDeliveries      int // the consumers' MaxDeliveries (0: retry forever; MQTT has no limit)
	sub                *autopaho.ConnectionManager
	plan               atomic.Pointer[Plan]
	mu                 sync.Mutex
	dls                []deadLetter
}

// openMQTT names the pass's topics and subscribes the harness's session to
// the dead-letter topic, before anything is published.
func openMQTT(ctx context.Context, cfg Config, e *env, maxDeliveries int, naive bool) (bus, error) {
	tag := fmt.Sprintf("idem-chaos-%d-%d", os.Getpid(), time.Now().UnixNano())
	if naive {
		tag += "-naive"
	}
	b := &mqttBus{cfg: cfg, e: e, naive: naive, topic: tag + "/orders", dlq: tag + "/dlq", maxDeliveries: maxDeliveries}
	var err error
	if b.counts, err = os.MkdirTemp(e.logs, "counts-"); err != nil {
		return nil, err
	}
	b.sub, err = dialMQTT(ctx, e.broker.URL(), tag+"-dlq", b.dlq, func(pr paho.PublishReceived) (bool, error) {
		m := mqttidem.MessageOf(&mqttidem.Message{Publish: pr.Packet})
		b.mu.Lock()
		b.dls = append(b.dls, newDeadLetter(m.ID, m.Headers[idem.HeaderReason], m.Payload))
		b.mu.Unlock()
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	// The slots' sessions and their shared subscription exist before the
	// first publish, which MQTT would drop without a subscriber.
	for slot := range cfg.Consumers {
		cm, err := dialMQTT(ctx, e.broker.URL(), mqttClientID(b.durable(), slot), mqttShare(b.topic), nil)
		if err != nil {
			b.close()
			return nil, err
		}
		cm.Disconnect(ctx)
	}
	return b, nil
}

func (b *mqttBus) names(cc *childConfig) {
	cc.Source, cc.Durable, cc.DLQ, cc.Counts, cc.MaxDeliveries = b.topic, b.durable(), b.dlq, b.counts, b.maxDeliveries
}

func (b *mqttBus) durable() string { return b.topic + "-" + mqttGroup }

// mqttClientID is the persistent session of a consumer slot.
func mqttClientID(durable string, slot int) string { return fmt.Sprintf("%s-%d", durable, slot) }

// mqttShare is the shared subscription of the consumers of topic.
func mqttShare(topic string) string { return "$share/" + mqttGroup + "/" + topic }

func (b *mqttBus) close() { b.sub.Disconnect(context.Background()) }

// progress: MQTT tells nothing of a session's queue, so progress is read
// from the effects: the planned messages whose order is charged or
// dead-lettered (for idem's pass a conflict and a poison message count
// once dead-lettered; the naive consumer drops them).
func (b *mqttBus) progress(ctx context.Context) (int64, bool, bool) {
	plan := b.plan.Load()
	if plan == nil {
		return 0, false, true
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ef, err := readEffects(ctx, b.cfg, b.e, passTables(b.naive), &Pass{})
	if err != nil {
		return 0, false, false
	}
	dead := map[string]bool{}
	for _, d := range b.snapshot() {
		dead[d.id] = true
	}
	var n int64
	for _, m := range plan.Msgs {
		id := m.ID
		if id == "" {
			id = m.Order.Order
		}
		switch {
		case m.Kind == kindOrder || m.Kind == kindRetry:
			if len(ef.charges[id]) == 0 && !dead[id] {
				continue
			}
		case b.naive:
		case !dead[id]:
			continue
		}
		n++
	}
	return n, n == int64(len(plan.Msgs)), true
}

func (b *mqttBus) snapshot() []deadLetter {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]deadLetter(nil), b.dls...)
}

func (b *mqttBus) deliveries(context.Context) int { return deliveryCounts(b.counts) }

// publishOf is a planned message as a QoS 1 PUBLISH: the order id in the
// idem-id user property (none for a message without a key).
func publishOf(topic string, m planned) *paho.Publish {
	props := &paho.PublishProperties{ContentType: "application/json"}
	if m.ID != "" {
		props.User = append(props.User, paho.UserProperty{Key: mqttidem.PropertyID, Value: m.ID})
	}
	return &paho.Publish{QoS: 1, Topic: topic, Payload: m.Data, Properties: props}
}

// produce publishes at QoS 1 on a session of its own and publishes again
// each message whose PUBACK did not come (when the PUBACK is what was
// lost, the order is in the topic twice: a producer retry of the real
// kind).
func (b *mqttBus) produce(ctx context.Context, plan *Plan, settled *atomic.Int64) error {
	b.plan.Store(plan)
	cm, err := dialMQTT(ctx, b.e.broker.URL(), b.topic+"-producer", "", nil)
	if err != nil {
		return err
	}
	defer cm.Disconnect(context.Background())
	return produceBatches(ctx, plan, settled, 100, func(todo []planned) []planned {
		for j, m := range todo {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			res, err := cm.Publish(pctx, publishOf(b.topic, m))
			cancel()
			if err != nil || res.ReasonCode >= 0x80 {
				return todo[j:]
			}
		}
		return nil
	})
}

func (b *mqttBus) deadLetters(context.Context) ([]deadLetter, error) { return b.snapshot(), nil }

// runMQTT is an MQTT consumer process: the persistent session of its
// slot on the pass's shared subscription, run by the mqttidem package's
// consumer.
func runMQTT(ctx context.Context, cfg childConfig, l *ledger) error {
	count := newCounter(cfg.Counts)
	counted := func(pr paho.PublishReceived) (bool, error) { count.add(1); return false, nil }
	id, share := mqttClientID(cfg.Durable, cfg.Slot), mqttShare(cfg.Source)
	if cfg.Naive {
		return runNaiveMQTT(ctx, cfg, id, share, counted, l)
	}
	logf("started")
	opts := l.options()
	opts.Scope = cfg.Durable
	g, err := idem.New(l.store, opts)
	if err != nil {
		return err
	}
	h := handlerFor(l, func(m *mqttidem.Message) []byte { return m.Payload }, broker.Handle[*mqttidem.Message],
		broker.HandleTx[pgx.Tx, *mqttidem.Message], broker.HandleTx[*sql.Tx, *mqttidem.Message])
	c, err := mqttidem.NewConsumer(g, h, mqttidem.Options{
		Server: cfg.BrokerURL, ClientID: id, Topic: share, DeadLetterTopic: cfg.DLQ, SessionExpiry: mqttSession,
		Concurrency: cfg.Concurrency, MaxDeliveries: cfg.MaxDeliveries,
		Backoff: engineBackoff, ShutdownTimeout: engineShutdown, Hooks: engineHooks[*mqttidem.Message](l),
		Config: func(c *autopaho.ClientConfig) {
			c.ReconnectBackoff = autopaho.NewConstantBackoff(200 * time.Millisecond)
			c.OnPublishReceived = append([]func(paho.PublishReceived) (bool, error){counted}, c.OnPublishReceived...)
		},
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// runNaiveMQTT: charge, commit, PUBACK (paho acks once the handler
// returns), one message at a time; a failed charge is tried again in
// place. An undecodable payload is acked (dropped).
func runNaiveMQTT(ctx context.Context, cfg childConfig, id, share string, counted func(paho.PublishReceived) (bool, error), l *ledger) error {
	_, err := dialMQTT(ctx, cfg.BrokerURL, id, share, func(pr paho.PublishReceived) (bool, error) {
		counted(pr)
		for ctx.Err() == nil {
			switch err := l.naive(ctx, pr.Packet.Payload); {
			case err == nil:
				l.kill.pass(pointSettle)
				return true, nil
			case errors.Is(err, errPoison):
				return true, nil
			}
			time.Sleep(100 * time.Millisecond)
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}
