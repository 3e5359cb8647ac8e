package servicebustest

import (
	"strconv"
	"strings"
	"time"

	"github.com/idemgo/idem/internal/amqptest"
)

// The management operations of scheduled messages, deferral and sessions
// (https://learn.microsoft.com/azure/service-bus-messaging/service-bus-amqp-request-response),
// and the answer to every other one.

// refused is the answer to an operation servicebustest does not model:
// status 404 with the condition amqp:not-implemented and a description
// naming the operation. The client reports a 404 at once as a
// non-retryable *azservicebus.Error (CodeNotFound) whose text carries the
// description; any other failure status it takes for a lost connection,
// and retries for about 40 seconds: a test double must fail the call
// instead.
func refused(op string) (int, string, string) {
	return 404, "servicebustest does not model the operation " + op + " (refused, not retried)", "amqp:not-implemented"
}

// notFound is Service Bus's answer to a sequence number with no message
// to receive (MessageNotFoundException); 404 is final for the client.
const notFoundCondition = "com.microsoft:message-not-found"

// sequenceNumbers reads the request's sequence-numbers (an amqptest.Array of long).
func sequenceNumbers(value amqptest.Map) []int64 {
	v, _ := value.Get("sequence-numbers")
	var out []int64
	add := func(x any) {
		if n, ok := x.(int64); ok {
			out = append(out, n)
		}
	}
	switch a := v.(type) {
	case amqptest.Array:
		for _, x := range a {
			add(x)
		}
	case []any:
		for _, x := range a {
			add(x)
		}
	}
	return out
}

// schedule stores each message of a schedule-message request with its
// ScheduledEnqueueTime (x-opt-scheduled-enqueue-time) and answers their
// sequence numbers, which cancel-scheduled-message takes. Scheduling on a
// topic is refused: its messages would be scheduled per subscription.
func (s *Server) schedule(l *link, value amqptest.Map) (int, string, string, any) {
	path := strings.TrimSuffix(l.Address, "/$management")
	e, ok := s.lookupSend(path).(*entity)
	if !ok {
		if s.topics[strings.ToLower(strings.TrimPrefix(path, "/"))] != nil {
			code, desc, cond := refused("com.microsoft:schedule-message on a topic")
			return code, desc, cond, nil
		}
		return 404, "no queue " + path, "amqp:not-found", nil
	}
	raw, _ := value.Get("messages")
	list, _ := raw.([]any)
	var msgs []*message
	for _, x := range list {
		entry, _ := x.(amqptest.Map)
		b, _ := entry.Get("message")
		data, _ := b.([]byte)
		m, err := parseMessage(data)
		if err != nil {
			return 400, err.Error(), "amqp:decode-error", nil
		}
		msgs = append(msgs, m)
	}
	if err := refuseSessionless(e, msgs); err != nil {
		// 404 (final for the client) with Service Bus's condition and text.
		_, f := amqptest.DescCode(*err)
		return 404, amqptest.AsString(amqptest.Field(f, 1)), amqptest.AsString(amqptest.Field(f, 0)), nil
	}
	now := time.Now()
	seqs := make(amqptest.Array, 0, len(msgs))
	for _, m := range msgs {
		if e.dedup.duplicate(m.id, now) {
			continue
		}
		e.add(m, now)
		seqs = append(seqs, m.seq)
	}
	return 200, "OK", "", amqptest.Pairs("sequence-numbers", seqs)
}

// cancelScheduled removes the scheduled messages of the sequence numbers
// given; one already enqueued (or never scheduled) is not found.
func (s *Server) cancelScheduled(l *link, value amqptest.Map) (int, string, string) {
	e := l.entity
	if e == nil {
		code, desc, cond, _ := s.schedule(l, nil) // the same refusal or not-found
		return code, desc, cond
	}
	for _, seq := range sequenceNumbers(value) {
		m := e.bySeq(seq)
		if m == nil || m.state != stateScheduled {
			return 404, "The scheduled message with sequence number " + itoa(seq) + " was not found.", notFoundCondition
		}
		e.remove(m)
	}
	return 200, "OK", ""
}

func (e *entity) bySeq(seq int64) *message {
	for _, m := range e.msgs {
		if m.seq == seq {
			return m
		}
	}
	return nil
}

// receiveDeferred answers receive-by-sequence-number: the deferred
// messages of the sequence numbers given, locked (PeekLock, their lock
// token in the x-opt-lock-token delivery annotation and beside each
// message) or removed (ReceiveAndDelete). A sequence number without a
// deferred message fails the request, as on Service Bus. On a session
// entity only the receiver's own session's messages are given.
func (s *Server) receiveDeferred(l *link, assoc string, value amqptest.Map) (int, string, string, any) {
	e := l.entity
	peekLock := true
	if v, ok := value.Get("receiver-settle-mode"); ok {
		peekLock = amqptest.AsUint(v) == 1
	}
	var holder *link
	if e.sessions != nil {
		holder = receiverNamed(l, assoc)
		if holder == nil || holder.sess == nil || !holder.sess.locked(time.Now()) {
			return sessionLockLost()
		}
	}
	seqs := sequenceNumbers(value)
	msgs := make([]*message, 0, len(seqs))
	for _, seq := range seqs {
		m := e.bySeq(seq)
		if m == nil || m.state != stateDeferred || (holder != nil && m.sessionID != holder.sess.id) {
			return 404, "Failed to lock one or more specified messages. The message with sequence number " + itoa(seq) + " is not deferred or does not exist.", notFoundCondition, nil
		}
		msgs = append(msgs, m)
	}
	out := make([]any, 0, len(msgs))
	for _, m := range msgs {
		if !peekLock {
			out = append(out, amqptest.Pairs("message", m.encode(false)))
			e.remove(m)
			continue
		}
		e.lock(m, holder)
		token := m.token
		out = append(out, amqptest.Pairs("message", m.encode(true, &token), "lock-token", token))
	}
	return 200, "OK", "", amqptest.Pairs("messages", out)
}

func sessionLockLost() (int, string, string, any) {
	return 410, "The session lock has expired on the MessageSession. Accept a new MessageSession.", "com.microsoft:session-lock-lost", nil
}

// sessionOp answers renew-session-lock, get-session-state and
// set-session-state, for the receiver holding the session only (the
// request's associated link): any other gets session-lock-lost.
func (s *Server) sessionOp(l *link, assoc, op string, value amqptest.Map) (int, string, string, any) {
	e := l.entity
	if e.sessions == nil {
		return 404, "The entity " + e.path + " does not require sessions.", "amqp:not-allowed", nil
	}
	id := ""
	if v, ok := value.Get("session-id"); ok {
		id = amqptest.AsString(v)
	}
	holder := receiverNamed(l, assoc)
	ss := e.sessions[id]
	now := time.Now()
	if ss == nil || holder == nil || ss.holder != holder || !ss.locked(now) {
		return sessionLockLost()
	}
	switch op {
	case "com.microsoft:renew-session-lock":
		e.renewSession(ss, now)
		return 200, "OK", "", amqptest.Pairs("expiration", ss.lockedUntil)
	case "com.microsoft:get-session-state":
		var state any
		if ss.state != nil {
			state = ss.state
		}
		return 200, "OK", "", amqptest.Pairs("session-state", state)
	default:
		v, _ := value.Get("session-state")
		b, _ := v.([]byte)
		ss.state = b
		return 200, "OK", "", nil
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
