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
	stateScheduled // waiting for its ScheduledEnqueueTime
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
	sessions  map[string]*sbSession // by SessionID; nil: the entity has no sessions
	accepting []*link               // session receivers waiting for accept-next, in order
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
	holder        *link // the session receiver it is locked to (session entities)
	deferred      bool  // deferred: received only by its sequence number

	sessionID string        // the properties' group-id
	ttl       time.Duration // the header's ttl; 0: none
	scheduled time.Time     // x-opt-scheduled-enqueue-time; zero: none
	expiresAt time.Time     // zero: never
	due       *time.Timer   // the scheduled enqueue, then the expiry
}

func (m *message) clone() *message {
	c := *m
	c.ann = slices.Clone(m.ann)
	c.appProps = slices.Clone(m.appProps)
	c.timer, c.due = nil, nil
	return &c
}

func (m *message) stopTimers() {
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	if m.due != nil {
		m.due.Stop()
		m.due = nil
	}
}

// add stores m: scheduled when its ScheduledEnqueueTime is ahead (it gets
// its sequence number now, as on Service Bus), else available at once.
func (e *entity) add(m *message, now time.Time) {
	if m.seq == 0 || e.dlq != nil {
		e.seq++
		m.seq = e.seq
	}
	m.e = e
	e.msgs = append(e.msgs, m)
	if e.dlq != nil && m.scheduled.After(now) {
		m.state = stateScheduled
		e.armDue(m, m.scheduled)
		return
	}
	e.enqueue(m, now)
}

// enqueue makes m available from now; its time to live (its own, or the
// entity's default when that is shorter) runs from here. A dead letter
// never expires.
func (e *entity) enqueue(m *message, now time.Time) {
	m.enqueued, m.state, m.expiresAt = now, stateAvailable, time.Time{}
	if e.dlq != nil {
		ttl := m.ttl
		if d := e.opts.DefaultMessageTimeToLive; d > 0 && (ttl == 0 || d < ttl) {
			ttl = d
		}
		if ttl > 0 {
			m.expiresAt = now.Add(ttl)
			e.armDue(m, m.expiresAt)
		}
	}
	if e.sessions != nil {
		e.session(m.sessionID)
	}
	e.pump()
}

// armDue wakes m at at: a scheduled message is enqueued, an available one
// that has expired is expired (a locked one when its lock ends).
func (e *entity) armDue(m *message, at time.Time) {
	m.due = e.s.at(m.due, at, func() {
		if m.e != e {
			return
		}
		now := time.Now()
		switch {
		case m.state == stateScheduled && !now.Before(m.scheduled):
			e.enqueue(m, now)
		case m.state == stateScheduled:
			e.armDue(m, m.scheduled)
		case m.state == stateAvailable && m.expired(now):
			e.expire(m)
		}
	})
}

func (m *message) expired(now time.Time) bool {
	return !m.expiresAt.IsZero() && !now.Before(m.expiresAt)
}

// expire drops m, or moves it to the dead-letter queue when the entity
// dead-letters on expiry, with the reason and description Service Bus
// gives (https://learn.microsoft.com/azure/service-bus-messaging/service-bus-dead-letter-queues#time-to-live).
func (e *entity) expire(m *message) {
	if e.opts.DeadLetteringOnMessageExpiration {
		e.deadLetter(m, "TTLExpiredException", "The message expired and was dead lettered.", nil)
		return
	}
	e.remove(m)
}

// returned puts m, just unlocked, back in line, unless it expired while
// it was locked.
func (e *entity) returned(m *message) {
	if m.expired(time.Now()) {
		e.expire(m)
		return
	}
	e.pump()
}

func (e *entity) remove(m *message) {
	m.stopTimers()
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
	now := time.Now()
	if e.sessions != nil {
		e.assignSessions(now)
	} else if len(e.receivers) == 0 {
		return
	}
	var gone, expired []*message
	for _, m := range e.msgs {
		if m.state != stateAvailable {
			continue
		}
		if m.expired(now) {
			expired = append(expired, m)
			continue
		}
		l, more := e.receiverFor(m, now)
		if !more {
			break
		}
		if l == nil {
			continue
		}
		if l.settled {
			gone = append(gone, m) // ReceiveAndDelete: removed as it is sent
			l.transfer(nil, true, m.encode(false))
			continue
		}
		e.lock(m, l)
		id := l.transfer(tagOf(m.token), false, m.encode(true))
		l.s.unsettled[id] = &delivery{l: l, m: m, token: m.token}
	}
	for _, m := range gone {
		e.remove(m)
	}
	for _, m := range expired {
		e.expire(m)
	}
}

// receiverFor is the receive link with credit that gets m: the holder of
// m's session on a session entity (nil while it has none or no credit),
// else the next receiver round robin; more is false when no receiver has
// credit left for any message.
func (e *entity) receiverFor(m *message, now time.Time) (l *link, more bool) {
	if e.sessions == nil {
		l = e.nextReceiver()
		return l, l != nil
	}
	ss := e.sessions[m.sessionID]
	if ss == nil || !ss.locked(now) || ss.holder.credit == 0 {
		return nil, true
	}
	return ss.holder, true
}

// lock locks m for l: by its session's lock on a session entity, else by
// a lock of its own for the entity's lock duration.
func (e *entity) lock(m *message, l *link) {
	m.state = stateLocked
	m.token = newToken()
	e.locked[m.token] = m
	if e.sessions != nil {
		m.holder, m.lockedUntil = l, l.sess.lockedUntil
		return
	}
	m.lockedUntil = time.Now().Add(e.opts.LockDuration)
	e.arm(m)
}

// at stops old (if any) and returns a timer that runs fn at t under the
// server's lock, unless the server has closed by then.
func (s *Server) at(old *time.Timer, t time.Time, fn func()) *time.Timer {
	if old != nil {
		old.Stop()
	}
	return time.AfterFunc(time.Until(t), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.closed {
			fn()
		}
	})
}

// arm (re)starts m's lock timer for its lockedUntil.
func (e *entity) arm(m *message) {
	token := m.token
	m.timer = e.s.at(m.timer, m.lockedUntil, func() {
		if m.state != stateLocked || m.token != token || m.e != e {
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
	if m == nil || m.state != stateLocked {
		return nil
	}
	if m.holder != nil {
		// A session's messages are locked by the session's lock.
		if ss := e.sessions[m.sessionID]; ss == nil || ss.holder != m.holder || !time.Now().Before(ss.lockedUntil) {
			return nil
		}
		return m
	}
	if !time.Now().Before(m.lockedUntil) {
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
	m.state, m.holder = stateAvailable, nil
	if m.deferred {
		m.state = stateDeferred // a deferred message stays deferred
	}
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
	e.returned(m)
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
	// No x-opt-deadletter-source: Service Bus sets it only on a message
	// dead-lettered after auto-forwarding, which is not modelled.
	m.state, m.holder, m.expiresAt, m.deferred = stateAvailable, nil, time.Time{}, false
	m.e = e.dlq
	e.dlq.msgs = append(e.dlq.msgs, m)
	e.dlq.pump()
	e.pump()
}

// sessionLockLostState answers a settlement of a session's message once
// the session's lock is gone, with Service Bus's condition.
var sessionLockLostState = perf(codeRejected, amqpError("com.microsoft:session-lock-lost",
	"The session lock has expired on the MessageSession. Accept a new MessageSession.", nil))

var lockLost = perf(codeRejected, amqpError("com.microsoft:message-lock-lost",
	"The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue.", nil))

// settleDelivery applies the client's outcome for a delivery on its
// receive link and returns the state the server answers with.
func (s *Server) settleDelivery(d *delivery, state any) any {
	m := d.m
	e := m.e
	if e == nil || e.held(d.token) != m {
		if e != nil && e.sessions != nil {
			return sessionLockLostState
		}
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
		e.returned(m)
	case codeModified:
		props, _ := field(f, 2).(amqpMap)
		if asBool(field(f, 1)) { // undeliverable-here: Defer
			e.unlock(m)
			m.state, m.deferred = stateDeferred, true
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
			if ms := asUint(field(m.header, 2)); ms > 0 {
				m.ttl = time.Duration(ms) * time.Millisecond
			}
		case codeDeliveryAnn:
		case codeMessageAnn:
			m.ann, _ = dv.value.(amqpMap)
			if v, ok := m.ann.get("x-opt-scheduled-enqueue-time"); ok {
				m.scheduled, _ = v.(time.Time)
			}
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
			m.sessionID = asString(field(m.props, 10)) // group-id
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
//
// lockToken, when set, travels as the x-opt-lock-token delivery
// annotation: a message received by sequence number has no delivery tag.
func (m *message) encode(locked bool, lockTokens ...*uuid) []byte {
	var lockToken *uuid
	if len(lockTokens) > 0 {
		lockToken = lockTokens[0]
	}
	h := make([]any, 5)
	copy(h, m.header)
	h[3] = m.deliveryCount == 0
	h[4] = m.deliveryCount
	if !m.expiresAt.IsZero() {
		h[2] = uint32(m.expiresAt.Sub(m.enqueued) / time.Millisecond) // the time to live in force
	}
	ann := slices.Clone(m.ann)
	ann = ann.set(symbol("x-opt-sequence-number"), m.seq)
	ann = ann.set(symbol("x-opt-enqueued-time"), m.enqueued)
	if locked {
		ann = ann.set(symbol("x-opt-locked-until"), m.lockedUntil)
	}
	switch {
	case m.state == stateScheduled:
		ann = ann.set(symbol("x-opt-message-state"), int32(2))
	case m.deferred || m.state == stateDeferred:
		ann = ann.set(symbol("x-opt-message-state"), int32(1))
	}
	e := encoder{}
	e.value(perf(codeHeader, h...))
	if lockToken != nil {
		e.value(described{desc: uint64(codeDeliveryAnn), value: amqpMap{{symbol("x-opt-lock-token"), *lockToken}}})
	}
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
