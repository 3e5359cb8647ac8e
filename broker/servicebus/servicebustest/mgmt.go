package servicebustest

import (
	"strings"
	"time"

	"github.com/idemgo/idem/internal/amqptest"
)

// rpc answers a Service Bus management operation on <entity>/$management
// (put-token on $cbs the core answers).
func (s *Server) rpc(l *link, req *amqptest.Message) amqptest.Reply {
	op := ""
	if v, ok := req.AppProps.Get("operation"); ok {
		op = amqptest.AsString(v)
	}
	value, _ := req.Value().(amqptest.Map)
	assoc := ""
	if v, ok := req.AppProps.Get("associated-link-name"); ok {
		assoc = amqptest.AsString(v)
	}
	code, desc, condition := 200, "OK", ""
	var out any
	switch {
	case op == "com.microsoft:schedule-message":
		code, desc, condition, out = s.schedule(l, value)
	case op == "com.microsoft:cancel-scheduled-message":
		code, desc, condition = s.cancelScheduled(l, value)
	case l.entity == nil:
		code, desc = 404, "no entity for "+l.Address
	case op == "com.microsoft:receive-by-sequence-number":
		code, desc, condition, out = s.receiveDeferred(l, assoc, value)
	case op == "com.microsoft:renew-session-lock", op == "com.microsoft:get-session-state", op == "com.microsoft:set-session-state":
		code, desc, condition, out = s.sessionOp(l, assoc, op, value)
	case op == "com.microsoft:renew-lock":
		code, desc, condition, out = s.renewLocks(l.entity, value)
	case op == "com.microsoft:peek-message" && l.entity.sessions != nil:
		holder := receiverNamed(l, assoc)
		if holder == nil || holder.sess == nil {
			code, desc, condition, out = sessionLockLost()
			break
		}
		code, desc, condition, out = s.peek(l.entity, value, holder.sess.id)
	case op == "com.microsoft:peek-message":
		code, desc, condition, out = s.peek(l.entity, value)
	case op == "com.microsoft:update-disposition":
		code, desc, condition = s.updateDisposition(l.entity, value)
	default:
		code, desc, condition = refused(op)
	}
	return amqptest.Reply{Code: code, Description: desc, Condition: condition, Value: out}
}

func tokens(value amqptest.Map) []amqptest.UUID {
	v, _ := value.Get("lock-tokens")
	var ts []amqptest.UUID
	switch a := v.(type) {
	case amqptest.Array:
		for _, x := range a {
			if u, ok := x.(amqptest.UUID); ok {
				ts = append(ts, u)
			}
		}
	case []any:
		for _, x := range a {
			if u, ok := x.(amqptest.UUID); ok {
				ts = append(ts, u)
			}
		}
	}
	return ts
}

const lockLostDescription = "The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue."

// renewLocks extends each lock by the entity's lock duration from now
// (renew-lock: https://learn.microsoft.com/azure/service-bus-messaging/message-transfers-locks-settlement#renew-locks).
func (s *Server) renewLocks(e *entity, value amqptest.Map) (int, string, string, any) {
	ts := tokens(value)
	for _, t := range ts {
		if e.held(t) == nil {
			return 410, lockLostDescription, "com.microsoft:message-lock-lost", nil
		}
	}
	exp := make(amqptest.Array, 0, len(ts))
	for _, t := range ts {
		m := e.held(t)
		m.lockedUntil = time.Now().Add(e.opts.LockDuration)
		e.arm(m)
		exp = append(exp, m.lockedUntil)
	}
	return 200, "OK", "", amqptest.Pairs("expirations", exp)
}

// updateDisposition settles by lock token, as the client does when its
// receive link is gone.
func (s *Server) updateDisposition(e *entity, value amqptest.Map) (int, string, string) {
	status := ""
	if v, ok := value.Get("disposition-status"); ok {
		status = amqptest.AsString(v)
	}
	props, _ := value.Get("properties-to-modify")
	pm, _ := props.(amqptest.Map)
	for _, t := range tokens(value) {
		m := e.held(t)
		if m == nil {
			return 410, lockLostDescription, "com.microsoft:message-lock-lost"
		}
		switch strings.ToLower(status) {
		case "completed":
			e.remove(m)
		case "abandoned":
			e.abandon(m, pm)
		case "defered", "deferred":
			e.unlock(m)
			m.state, m.deferred = stateDeferred, true
		case "suspended":
			reason, desc := "", ""
			if v, ok := value.Get("deadletter-reason"); ok {
				reason = amqptest.AsString(v)
			}
			if v, ok := value.Get("deadletter-description"); ok {
				desc = amqptest.AsString(v)
			}
			e.deadLetter(m, reason, desc, pm)
		default:
			return 400, "unknown disposition-status " + status, "com.microsoft:argument-error"
		}
	}
	return 200, "OK", ""
}
