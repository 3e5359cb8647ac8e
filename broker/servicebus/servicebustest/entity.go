package servicebustest

import (
	"fmt"
	"slices"
	"time"

	"github.com/idemgo/idem/internal/amqptest"
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
	locked    map[amqptest.UUID]*message
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

	amqptest.Message // the sections as sent

	deliveryCount uint32
	state         msgState
	token         amqptest.UUID
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
	c.Ann = slices.Clone(m.Ann)
	c.AppProps = slices.Clone(m.AppProps)
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
	m.due = e.s.core.At(m.due, at, func() {
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
		if l := e.receivers[e.next]; l.Credit() > 0 {
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
		if l.Settled {
			gone = append(gone, m) // ReceiveAndDelete: removed as it is sent
			l.Transfer(nil, true, m.encode(false))
			continue
		}
		e.lock(m, l)
		l.Deliver(tagOf(m.token), m.encode(true), &delivery{m: m, token: m.token})
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
	if ss == nil || !ss.locked(now) || ss.holder.Credit() == 0 {
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

// arm (re)starts m's lock timer for its lockedUntil.
func (e *entity) arm(m *message) {
	token := m.token
	m.timer = e.s.core.At(m.timer, m.lockedUntil, func() {
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
func (e *entity) held(token amqptest.UUID) *message {
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
func (e *entity) abandon(m *message, props amqptest.Map) {
	e.unlock(m)
	for _, p := range props {
		m.AppProps = m.AppProps.Set(p.K, p.V)
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
func (e *entity) deadLetter(m *message, reason, description string, props amqptest.Map) {
	e.remove(m)
	if e.dlq == nil {
		return // a dead-letter queue has none of its own
	}
	m.AppProps = m.AppProps.Set("DeadLetterReason", reason)
	m.AppProps = m.AppProps.Set("DeadLetterErrorDescription", description)
	for _, p := range props {
		if k := amqptest.AsString(p.K); k != "DeadLetterReason" && k != "DeadLetterErrorDescription" {
			m.AppProps = m.AppProps.Set(p.K, p.V)
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
var sessionLockLostState = amqptest.Perf(amqptest.CodeRejected, amqptest.Error("com.microsoft:session-lock-lost",
	"The session lock has expired on the MessageSession. Accept a new MessageSession.", nil))

var lockLost = amqptest.Perf(amqptest.CodeRejected, amqptest.Error("com.microsoft:message-lock-lost",
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
	code, f := amqptest.DescCode(state)
	switch code {
	case amqptest.CodeAccepted:
		e.remove(m)
	case amqptest.CodeRejected:
		reason, desc, info := "", "", amqptest.Map(nil)
		if _, ef := amqptest.DescCode(amqptest.Field(f, 0)); ef != nil {
			info, _ = amqptest.Field(ef, 2).(amqptest.Map)
			if v, ok := info.Get("DeadLetterReason"); ok {
				reason = amqptest.AsString(v)
			}
			if v, ok := info.Get("DeadLetterErrorDescription"); ok {
				desc = amqptest.AsString(v)
			}
		}
		e.deadLetter(m, reason, desc, info)
		// Dead-lettered: the answer carries no error, which the client
		// would take for a failed settlement.
		return amqptest.Perf(amqptest.CodeRejected)
	case amqptest.CodeReleased:
		e.unlock(m)
		e.returned(m)
	case amqptest.CodeModified:
		props, _ := amqptest.Field(f, 2).(amqptest.Map)
		if amqptest.AsBool(amqptest.Field(f, 1)) { // undeliverable-here: Defer
			e.unlock(m)
			m.state, m.deferred = stateDeferred, true
			for _, p := range props {
				m.AppProps = m.AppProps.Set(p.K, p.V)
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
	_, ams, err := amqptest.ParseBatch(format, b)
	if err != nil {
		return nil, err
	}
	msgs := make([]*message, len(ams))
	for i, am := range ams {
		msgs[i] = newMessage(am)
	}
	return msgs, nil
}

func parseMessage(b []byte) (*message, error) {
	am, err := amqptest.ParseMessage(b)
	if err != nil {
		return nil, err
	}
	return newMessage(am), nil
}

// newMessage reads what Service Bus acts on from a message's sections:
// its time to live, scheduled enqueue time, id and session.
func newMessage(am *amqptest.Message) *message {
	m := &message{Message: *am}
	if ms := amqptest.AsUint(amqptest.Field(m.Header, 2)); ms > 0 {
		m.ttl = time.Duration(ms) * time.Millisecond
	}
	if v, ok := m.Ann.Get("x-opt-scheduled-enqueue-time"); ok {
		m.scheduled, _ = v.(time.Time)
	}
	m.id = m.ID()
	m.sessionID = amqptest.AsString(amqptest.Field(m.Props, 10)) // group-id
	return m
}

// encode is m as delivered: the header with its delivery count, the
// broker's annotations (sequence number, enqueued time, lock), and the
// sender's sections.
//
// lockToken, when set, travels as the x-opt-lock-token delivery
// annotation: a message received by sequence number has no delivery tag.
func (m *message) encode(locked bool, lockTokens ...*amqptest.UUID) []byte {
	var lockToken *amqptest.UUID
	if len(lockTokens) > 0 {
		lockToken = lockTokens[0]
	}
	h := make([]any, 5)
	copy(h, m.Header)
	h[3] = m.deliveryCount == 0
	h[4] = m.deliveryCount
	if !m.expiresAt.IsZero() {
		h[2] = uint32(m.expiresAt.Sub(m.enqueued) / time.Millisecond) // the time to live in force
	}
	ann := slices.Clone(m.Ann)
	ann = ann.Set(amqptest.Symbol("x-opt-sequence-number"), m.seq)
	ann = ann.Set(amqptest.Symbol("x-opt-enqueued-time"), m.enqueued)
	if locked {
		ann = ann.Set(amqptest.Symbol("x-opt-locked-until"), m.lockedUntil)
	}
	switch {
	case m.state == stateScheduled:
		ann = ann.Set(amqptest.Symbol("x-opt-message-state"), int32(2))
	case m.deferred || m.state == stateDeferred:
		ann = ann.Set(amqptest.Symbol("x-opt-message-state"), int32(1))
	}
	var da amqptest.Map
	if lockToken != nil {
		da = amqptest.Pairs(amqptest.Symbol("x-opt-lock-token"), *lockToken)
	}
	return m.Message.Encode(h, da, ann)
}
