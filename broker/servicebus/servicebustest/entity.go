package servicebustest

import (
	"fmt"
	"slices"
	"time"
)

type msgState int

const (
	stateAvailable msgState = iota
	stateLocked
	stateDeferred
)

// entity is a queue, a subscription or a dead-letter queue. Guarded by
// the server's lock.
type entity struct {
	s         *Server
	path      string
	opts      QueueOptions
	msgs      []*message // in sequence order
	locked    map[uuid]*message
	dlq       *entity // nil for a dead-letter queue
	dedup     *dedup
	receivers []*link
	next      int // round-robin position in receivers
	seq       int64
}

// message is one stored message: the sections the sender sent, kept
// encoded where the server never changes them.
type message struct {
	e        *entity
	seq      int64
	enqueued time.Time
	id       string

	header   []any   // the header section's fields
	ann      amqpMap // message annotations
	props    []any   // the properties section's fields (nil: none sent)
	appProps amqpMap
	body     []byte // body sections and footer, encoded

	deliveryCount uint32
	state         msgState
	token         uuid
	lockedUntil   time.Time
	timer         *time.Timer
	dlSource      string
}

func (m *message) clone() *message {
	c := *m
	c.ann = slices.Clone(m.ann)
	c.appProps = slices.Clone(m.appProps)
	c.timer = nil
	return &c
}

func (e *entity) add(m *message, now time.Time) {
	if m.seq == 0 || e.dlq != nil {
		e.seq++
		m.seq = e.seq
	}
	m.e, m.enqueued, m.state = e, now, stateAvailable
	e.msgs = append(e.msgs, m)
	e.pump()
}

func (e *entity) remove(m *message) {
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	if m.state == stateLocked {
		delete(e.locked, m.token)
	}
	if i, ok := slices.BinarySearchFunc(e.msgs, m.seq, func(x *message, seq int64) int {
		return int(x.seq - seq)
	}); ok && e.msgs[i] == m {
		e.msgs = slices.Delete(e.msgs, i, i+1)
		return
	}
	if i := slices.Index(e.msgs, m); i >= 0 {
		e.msgs = slices.Delete(e.msgs, i, i+1)
	}
}

// nextReceiver returns a receive link with credit, round robin, or nil.
func (e *entity) nextReceiver() *link {
	for range e.receivers {
		e.next = (e.next + 1) % len(e.receivers)
		if l := e.receivers[e.next]; l.credit > 0 {
			return l
		}
	}
	return nil
}

// pump hands available messages to receivers with credit, in sequence
// order.
func (e *entity) pump() {
	if len(e.receivers) == 0 {
		return
	}
	var gone []*message
	for _, m := range e.msgs {
		if m.state != stateAvailable {
			continue
		}
		l := e.nextReceiver()
		if l == nil {
			break
		}
		if l.settled {
			gone = append(gone, m) // ReceiveAndDelete: removed as it is sent
			l.transfer(nil, true, m.encode(false))
			continue
		}
		e.lock(m)
		id := l.transfer(tagOf(m.token), false, m.encode(true))
		l.s.unsettled[id] = &delivery{l: l, m: m, token: m.token}
	}
	for _, m := range gone {
		e.remove(m)
	}
}

func (e *entity) lock(m *message) {
	m.state = stateLocked
	m.token = newToken()
	e.locked[m.token] = m
	m.lockedUntil = time.Now().Add(e.opts.LockDuration)
	e.arm(m)
}

// arm (re)starts m's lock timer for its lockedUntil.
func (e *entity) arm(m *message) {
	if m.timer != nil {
		m.timer.Stop()
	}
	token := m.token
	m.timer = time.AfterFunc(time.Until(m.lockedUntil), func() {
		s := e.s
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed || m.state != stateLocked || m.token != token || m.e != e {
			return
		}
		if time.Now().Before(m.lockedUntil) {
			e.arm(m)
			return
		}
		// An expired lock counts as a failed delivery, as an abandon does.
		e.abandon(m, nil)
	})
}

// held returns the message locked under token, nil when the lock is lost
// (expired, settled, or never given).
func (e *entity) held(token uuid) *message {
	m := e.locked[token]
	if m == nil || m.state != stateLocked || !time.Now().Before(m.lockedUntil) {
		return nil
	}
	return m
}

func (e *entity) unlock(m *message) {
	delete(e.locked, m.token)
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	m.state = stateAvailable
}

// abandon makes m available again with DeliveryCount + 1, or dead-letters
// it once its deliveries reach MaxDeliveryCount.
func (e *entity) abandon(m *message, props amqpMap) {
	e.unlock(m)
	for _, p := range props {
		m.appProps = m.appProps.set(p.k, p.v)
	}
	m.deliveryCount++
	if e.dlq != nil && int(m.deliveryCount) >= e.opts.MaxDeliveryCount {
		e.deadLetter(m, "MaxDeliveryCountExceeded",
			fmt.Sprintf("Message could not be consumed after %d delivery attempts.", e.opts.MaxDeliveryCount), nil)
		return
	}
	e.pump()
}

// deadLetter moves m to the entity's dead-letter queue with its reason
// and description as application properties, beside props.
func (e *entity) deadLetter(m *message, reason, description string, props amqpMap) {
	e.remove(m)
	if e.dlq == nil {
		return // a dead-letter queue has none of its own
	}
	m.appProps = m.appProps.set("DeadLetterReason", reason)
	m.appProps = m.appProps.set("DeadLetterErrorDescription", description)
	for _, p := range props {
		if k := asString(p.k); k != "DeadLetterReason" && k != "DeadLetterErrorDescription" {
			m.appProps = m.appProps.set(p.k, p.v)
		}
	}
	m.dlSource = e.path
	m.state = stateAvailable
	m.e = e.dlq
	e.dlq.msgs = append(e.dlq.msgs, m)
	e.dlq.pump()
	e.pump()
}

var lockLost = perf(codeRejected, amqpError("com.microsoft:message-lock-lost",
	"The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue.", nil))

// settleDelivery applies the client's outcome for a delivery on its
// receive link and returns the state the server answers with.
func (s *Server) settleDelivery(d *delivery, state any) any {
	m := d.m
	e := m.e
	if e == nil || e.held(d.token) != m {
		return lockLost
	}
	code, f := descCode(state)
	switch code {
	case codeAccepted:
		e.remove(m)
	case codeRejected:
		reason, desc, info := "", "", amqpMap(nil)
		if _, ef := descCode(field(f, 0)); ef != nil {
			info, _ = field(ef, 2).(amqpMap)
			if v, ok := info.get("DeadLetterReason"); ok {
				reason = asString(v)
			}
			if v, ok := info.get("DeadLetterErrorDescription"); ok {
				desc = asString(v)
			}
		}
		e.deadLetter(m, reason, desc, info)
		// Dead-lettered: the answer carries no error, which the client
		// would take for a failed settlement.
		return perf(codeRejected)
	case codeReleased:
		e.unlock(m)
		e.pump()
	case codeModified:
		props, _ := field(f, 2).(amqpMap)
		if asBool(field(f, 1)) { // undeliverable-here: Defer
			e.unlock(m)
			m.state = stateDeferred
			for _, p := range props {
				m.appProps = m.appProps.set(p.k, p.v)
			}
			return state
		}
		e.abandon(m, props)
	default:
		return lockLost
	}
	return state
}

func parseMessages(format uint32, b []byte) ([]*message, error) {
	m, err := parseMessage(b)
	if err != nil || format != batchMessageFormat {
		return []*message{m}, err
	}
	// A batch: each data section of the envelope is one encoded message.
	var out []*message
	d := decoder{b: m.body}
	for d.i < len(d.b) {
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		dv, ok := v.(described)
		if !ok || asUint(dv.desc) != codeData {
			continue
		}
		data, _ := dv.value.([]byte)
		one, err := parseMessage(data)
		if err != nil {
			return nil, err
		}
		out = append(out, one)
	}
	return out, nil
}

func parseMessage(b []byte) (*message, error) {
	m := &message{}
	d := decoder{b: b}
	for d.i < len(b) {
		start := d.i
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		dv, ok := v.(described)
		if !ok {
			return nil, fmt.Errorf("amqp: message section is not described")
		}
		switch asUint(dv.desc) {
		case codeHeader:
			m.header, _ = dv.value.([]any)
		case codeDeliveryAnn:
		case codeMessageAnn:
			m.ann, _ = dv.value.(amqpMap)
		case codeProperties:
			m.props, _ = dv.value.([]any)
			if m.props == nil {
				m.props = []any{}
			}
			switch id := field(m.props, 0).(type) {
			case string:
				m.id = id
			case nil:
			default:
				m.id = fmt.Sprint(id)
			}
		case codeAppProperties:
			m.appProps, _ = dv.value.(amqpMap)
		default:
			m.body = append(m.body, b[start:d.i]...)
		}
	}
	return m, nil
}

// encode is m as delivered: the header with its delivery count, the
// broker's annotations (sequence number, enqueued time, lock), and the
// sender's sections.
func (m *message) encode(locked bool) []byte {
	h := make([]any, 5)
	copy(h, m.header)
	h[3] = m.deliveryCount == 0
	h[4] = m.deliveryCount
	ann := slices.Clone(m.ann)
	ann = ann.set(symbol("x-opt-sequence-number"), m.seq)
	ann = ann.set(symbol("x-opt-enqueued-time"), m.enqueued)
	if locked {
		ann = ann.set(symbol("x-opt-locked-until"), m.lockedUntil)
	}
	if m.dlSource != "" {
		ann = ann.set(symbol("x-opt-deadletter-source"), m.dlSource)
	}
	if m.state == stateDeferred {
		ann = ann.set(symbol("x-opt-message-state"), int32(1))
	}
	e := encoder{}
	e.value(perf(codeHeader, h...))
	e.value(described{desc: uint64(codeMessageAnn), value: ann})
	props := m.props
	if props == nil {
		props = []any{}
	}
	e.value(described{desc: uint64(codeProperties), value: props})
	if len(m.appProps) > 0 {
		e.value(described{desc: uint64(codeAppProperties), value: m.appProps})
	}
	e.b = append(e.b, m.body...)
	return e.b
}
