package dlq

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	mqttidem "github.com/idemgo/idem/broker/mqtt"
)

// ErrNoSession means the MQTT dead-letter session did not exist before
// this call: the broker kept no dead letter for it. MQTT keeps a QoS 1
// message only for the sessions subscribed to its topic when it is
// published (a retained message is one per topic, the last, so idem never
// retains a dead letter), so a topic's dead letters can be read only by a
// persistent session subscribed before they came. The call subscribed
// the session: dead letters published from then on wait in it.
var ErrNoSession = errors.New("no MQTT dead-letter session")

// ErrOutOfOrder means a dead letter was not replayed because MQTT
// acknowledges a session's messages in the order they came: it could not
// be removed from the session while a dead letter before it stays.
var ErrOutOfOrder = errors.New("dead letter behind one not replayed")

// mqttQueue reads a dead-letter topic through a persistent session of its
// own (clean start false, never expiring, subscribed at QoS 1): the
// broker keeps every dead letter published to the topic for it, whether
// connected or not. Each List connects, takes what the session holds
// without acking it (a receive maximum of 65535 lets the broker send
// them all) and disconnects: the broker sends every unacked one again on
// the next connection. Replay acks what it replayed, in order.
type mqttQueue struct {
	server         *url.URL
	name           string
	topic, client  string
	wait           time.Duration // the quiet that ends a read
	user, password string

	mu sync.Mutex // one connection of the session at a time: a second would take it over
}

// OpenMQTT opens mqtt://[USER:PASS@]HOST:PORT?dlq=TOPIC[&client=ID]
// [&wait=DURATION] (or mqtts://): TOPIC is the consumers' DeadLetterTopic
// (a filter may have wildcards), ID the dead-letter session's client id
// (default idem-dlq; one per reader: two tools on one id take the session
// from each other), DURATION how long a read waits for the next dead
// letter before it takes the session as read (default 1s).
func OpenMQTT(_ context.Context, u *url.URL, _ string) (Queue, error) {
	params := u.Query()
	q := &mqttQueue{name: u.Redacted(), topic: params.Get("dlq"), client: params.Get("client"), wait: time.Second}
	if q.topic == "" {
		return nil, fmt.Errorf("%w: %s needs ?dlq=TOPIC (the consumers' dead-letter topic)", ErrBadURL, q.name)
	}
	if q.client == "" {
		q.client = "idem-dlq"
	}
	if w := params.Get("wait"); w != "" {
		d, err := time.ParseDuration(w)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%w: %s: wait=%q is not a duration", ErrBadURL, q.name, w)
		}
		q.wait = d
	}
	if u.User != nil {
		q.user = u.User.Username()
		q.password, _ = u.User.Password()
	}
	server := *u
	server.RawQuery = ""
	q.name = server.Redacted()
	server.User = nil
	q.server = &server
	return q, nil
}

func (q *mqttQueue) Name() string {
	return "MQTT topic " + q.topic + " (session " + q.client + ") at " + q.name
}

func (q *mqttQueue) Close() error { return nil }

// mqttRead is one connection of the dead-letter session and what it
// received.
type mqttRead struct {
	cm   *autopaho.ConnectionManager
	pubs []paho.PublishReceived
}

// read connects the session, subscribes it, and takes what it holds
// until q.wait passes without a dead letter. The caller disconnects.
func (q *mqttQueue) read(ctx context.Context) (*mqttRead, error) {
	var (
		mu      sync.Mutex
		got     []paho.PublishReceived // what arrived, until read returns
		closed  bool
		r       = &mqttRead{}
		arrived = make(chan struct{}, 1)
		up      = make(chan *paho.Connack, 1)
	)
	cfg := autopaho.ClientConfig{
		ServerUrls: []*url.URL{q.server}, KeepAlive: 30, ConnectTimeout: 10 * time.Second,
		CleanStartOnInitialConnection: false, SessionExpiryInterval: 0xFFFFFFFF, // never expires
		ConnectUsername: q.user, ConnectPassword: []byte(q.password),
		ConnectPacketBuilder: func(c *paho.Connect, _ *url.URL) (*paho.Connect, error) {
			if c.Properties == nil {
				c.Properties = &paho.ConnectProperties{}
			}
			most := uint16(65535) // every held dead letter at once, none acked
			c.Properties.ReceiveMaximum = &most
			return c, nil
		},
		OnConnectionUp: func(_ *autopaho.ConnectionManager, ca *paho.Connack) {
			select {
			case up <- ca:
			default:
			}
		},
		ClientConfig: paho.ClientConfig{ClientID: q.client, EnableManualAcknowledgment: true, SendAcksInterval: 10 * time.Millisecond,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
				if pr.Packet.QoS == 0 {
					return false, nil
				}
				mu.Lock()
				if !closed { // a late one stays unacked in the session, for the next read
					got = append(got, pr)
				}
				mu.Unlock()
				select {
				case arrived <- struct{}{}:
				default:
				}
				return true, nil
			}},
		},
	}
	if q.user == "" {
		cfg.ConnectUsername, cfg.ConnectPassword = "", nil
	}
	cm, err := autopaho.NewConnection(context.WithoutCancel(ctx), cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", q.name, err)
	}
	r.cm = cm
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := cm.AwaitConnection(cctx); err != nil {
		q.disconnect(r)
		return nil, fmt.Errorf("connect to %s: %w", q.name, err)
	}
	var ca *paho.Connack
	select {
	case ca = <-up:
	case <-cctx.Done():
		q.disconnect(r)
		return nil, fmt.Errorf("connect to %s: %w", q.name, cctx.Err())
	}
	if _, err := cm.Subscribe(cctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: q.topic, QoS: 1}}}); err != nil {
		q.disconnect(r)
		return nil, fmt.Errorf("subscribe %s at %s: %w", q.topic, q.name, err)
	}
	if !ca.SessionPresent {
		q.disconnect(r)
		return nil, fmt.Errorf("%w: the broker at %s had no session %s, so it kept no dead letter of %s for it: MQTT keeps a QoS 1 message only for "+
			"the sessions subscribed to its topic when it is published. The session is subscribed now and keeps the dead letters published from now on; "+
			"those published before are not kept anywhere (subscribe a persistent session to the dead-letter topic before the consumers run: "+
			"run this command once when deploying)", ErrNoSession, q.name, q.client, q.topic)
	}
	for quiet := time.NewTimer(q.wait); ; {
		select {
		case <-arrived:
			quiet.Reset(q.wait)
			continue
		case <-ctx.Done():
			q.disconnect(r)
			return nil, ctx.Err()
		case <-quiet.C:
		}
		break
	}
	mu.Lock()
	defer mu.Unlock()
	r.pubs, closed = got, true
	return r, nil
}

// disconnect ends the connection, leaving the session and what it holds
// unacked to the broker; the PUBACKs released before are sent first
// (paho sends them on its SendAcksInterval ticker).
func (q *mqttQueue) disconnect(r *mqttRead) {
	flush := time.NewTimer(50 * time.Millisecond)
	<-flush.C
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.cm.Disconnect(ctx)
}

// mqttDeadLetters are the dead letters of pubs, in order. An MQTT message
// has no id of the broker's, so a dead letter's is a digest of its topic,
// payload and properties, and "-2", "-3", ... for the second, third copy
// of one (a dead letter written twice when a connection dropped between
// the dead letter and the original's ack).
func mqttDeadLetters(pubs []paho.PublishReceived) []DeadLetter {
	out := make([]DeadLetter, len(pubs))
	seen := map[string]int{}
	for i, pr := range pubs {
		p := pr.Packet
		h := map[string]string{}
		var props []string
		if p.Properties != nil {
			for _, u := range p.Properties.User {
				h[u.Key] = u.Value
				props = append(props, u.Key+"\x00"+u.Value)
			}
			if p.Properties.ContentType != "" {
				h["Content-Type"] = p.Properties.ContentType
			}
		}
		sort.Strings(props)
		sum := sha256.Sum256([]byte(p.Topic + "\x01" + string(p.Payload) + "\x01" + strings.Join(props, "\x01")))
		id := hex.EncodeToString(sum[:6])
		if seen[id]++; seen[id] > 1 {
			id = fmt.Sprintf("%s-%d", id, seen[id])
		}
		dl := deadLetterOf(id, h, p.Payload)
		dl.Source = h[mqttidem.PropertyTopic]
		out[i] = dl
	}
	return out
}

func (q *mqttQueue) List(ctx context.Context, limit int) ([]DeadLetter, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	r, err := q.read(ctx)
	if err != nil {
		return nil, err
	}
	defer q.disconnect(r)
	dls := mqttDeadLetters(r.pubs)
	if limit > 0 && len(dls) > limit {
		dls = dls[:limit]
	}
	return dls, nil
}

// Replay publishes each selected dead letter back to its topic with
// mqttidem.Replay and acks it in the session, in the order they came.
// MQTT acks a session's messages in order, so a selected dead letter
// behind one not selected (or whose replay failed) cannot leave the
// session: it is not replayed, and done gets ErrOutOfOrder for it
// (replay the ones before it, or --all).
//
// paho can lose track of a delivery the broker sent at once on
// reconnection (its acknowledgement tracker is reset after the session's
// messages began to arrive), and then refuses its ack with
// paho.ErrPacketNotFound. Such a dead letter is replayed already: the
// session is read again and it is acked there, never replayed twice.
func (q *mqttQueue) Replay(ctx context.Context, ids []string, done func(DeadLetter, error)) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := mqttReplay{want: idSet(ids), replayed: map[string]bool{}, finished: map[string]bool{}, done: done}
	for reads := 1; ; reads++ {
		r, err := q.read(ctx)
		if err != nil {
			return err
		}
		again := p.run(ctx, q, r, reads < 3)
		q.disconnect(r)
		if !again {
			return nil
		}
	}
}

// mqttReplay is one Replay over the reads it takes.
type mqttReplay struct {
	want     map[string]bool
	replayed map[string]bool // replayed: acked on a later read if this one could not, never replayed twice
	finished map[string]bool // reported to done
	done     func(DeadLetter, error)
}

// run replays and acks what r holds; it reports whether the session must
// be read again (an ack paho refused, when retry allows another read).
func (p *mqttReplay) run(ctx context.Context, q *mqttQueue, r *mqttRead, retry bool) (again bool) {
	var blocker string // the first dead letter left in the session
	for i, dl := range mqttDeadLetters(r.pubs) {
		if p.finished[dl.ID] {
			continue
		}
		if !p.want[dl.ID] {
			if blocker == "" {
				blocker = dl.ID
			}
			continue
		}
		if blocker != "" {
			p.finished[dl.ID] = true
			p.done(dl, fmt.Errorf("%w: not replayed: MQTT acks a session's messages in order, so it could not leave the session while %s, before it, stays (replay that one first, or --all)", ErrOutOfOrder, blocker))
			continue
		}
		pr := r.pubs[i]
		var err error
		if !p.replayed[dl.ID] {
			err = mqttidem.Replay(ctx, r.cm, pr.Packet)
		}
		if err == nil {
			p.replayed[dl.ID] = true
			err = pr.Client.Ack(pr.Packet)
			if errors.Is(err, paho.ErrPacketNotFound) && retry {
				return true
			}
			if err != nil {
				err = fmt.Errorf("replayed, but not acked in session %s (it would be replayed again): %w", q.client, err)
			}
		}
		if err != nil {
			blocker = dl.ID
		}
		p.finished[dl.ID] = true
		p.done(dl, err)
	}
	return false
}

// Horizon: the dead-letter session never expires and MQTT has no delivery
// limit; what bounds how long a dead letter is kept is the broker's own
// setting, which MQTT does not let a client read.
func (q *mqttQueue) Horizon(context.Context) ([]Span, []error, error) {
	return []Span{{What: "dead-letter session " + q.client + " on " + q.topic + ": never expires (MQTT keeps what it holds until it is acked)", Unbounded: true, DeadLetters: true}},
		[]error{
			fmt.Errorf("%w: MQTT has no delivery limit and the consumers' sessions keep unacked messages until they expire (their SessionExpiry): the consumer's MaxDeliveries bounds redelivery", ErrNotReadable),
			fmt.Errorf("%w: a broker caps how many messages a session holds (Mosquitto: max_queued_messages, 1000 by default) and drops QoS 1 messages past it: not readable over MQTT", ErrNotReadable),
		}, nil
}

var _ Horizoner = (*mqttQueue)(nil)
