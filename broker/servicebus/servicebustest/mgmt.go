package servicebustest

import (
	"strings"
	"time"
)

// rpc answers a request sent on an RPC link: a put-token on $cbs (any
// token is accepted), or a Service Bus management operation on
// <entity>/$management. The reply goes to the client's link whose target
// is the request's reply-to, with the request's message-id as its
// correlation-id and the status in status-code / status-description.
func (s *Server) rpc(l *link, body []byte) {
	req, err := parseMessage(body)
	if err != nil {
		return
	}
	op := ""
	if v, ok := req.appProps.get("operation"); ok {
		op = asString(v)
	}
	var value amqpMap
	if d := (decoder{b: req.body}); len(req.body) > 0 {
		if v, err := d.value(); err == nil {
			if dv, ok := v.(described); ok {
				value, _ = dv.value.(amqpMap)
			}
		}
	}
	assoc := ""
	if v, ok := req.appProps.get("associated-link-name"); ok {
		assoc = asString(v)
	}
	code, desc, condition := 200, "OK", ""
	var out any
	switch {
	case op == "put-token":
		code, desc = 202, "Accepted"
	case op == "com.microsoft:schedule-message":
		code, desc, condition, out = s.schedule(l, value)
	case op == "com.microsoft:cancel-scheduled-message":
		code, desc, condition = s.cancelScheduled(l, value)
	case l.entity == nil:
		code, desc = 404, "no entity for "+l.address
	case op == "com.microsoft:receive-by-sequence-number":
		code, desc, condition, out = s.receiveDeferred(l, assoc, value)
	case op == "com.microsoft:renew-session-lock", op == "com.microsoft:get-session-state", op == "com.microsoft:set-session-state":
		code, desc, condition, out = s.sessionOp(l, assoc, op, value)
	case op == "com.microsoft:renew-lock":
		code, desc, condition, out = s.renewLocks(l.entity, value)
	case op == "com.microsoft:peek-message" && l.entity.sessions != nil:
		holder := l.s.c.receiverNamed(assoc)
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
	s.reply(l, req, code, desc, condition, out)
}

func tokens(value amqpMap) []uuid {
	v, _ := value.get("lock-tokens")
	var ts []uuid
	switch a := v.(type) {
	case array:
		for _, x := range a {
			if u, ok := x.(uuid); ok {
				ts = append(ts, u)
			}
		}
	case []any:
		for _, x := range a {
			if u, ok := x.(uuid); ok {
				ts = append(ts, u)
			}
		}
	}
	return ts
}

const lockLostDescription = "The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue."

// renewLocks extends each lock by the entity's lock duration from now
// (renew-lock: https://learn.microsoft.com/azure/service-bus-messaging/message-transfers-locks-settlement#renew-locks).
func (s *Server) renewLocks(e *entity, value amqpMap) (int, string, string, any) {
	ts := tokens(value)
	for _, t := range ts {
		if e.held(t) == nil {
			return 410, lockLostDescription, "com.microsoft:message-lock-lost", nil
		}
	}
	exp := make(array, 0, len(ts))
	for _, t := range ts {
		m := e.held(t)
		m.lockedUntil = time.Now().Add(e.opts.LockDuration)
		e.arm(m)
		exp = append(exp, m.lockedUntil)
	}
	return 200, "OK", "", amqpMap{{"expirations", exp}}
}

// updateDisposition settles by lock token, as the client does when its
// receive link is gone.
func (s *Server) updateDisposition(e *entity, value amqpMap) (int, string, string) {
	status := ""
	if v, ok := value.get("disposition-status"); ok {
		status = asString(v)
	}
	props, _ := value.get("properties-to-modify")
	pm, _ := props.(amqpMap)
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
			if v, ok := value.get("deadletter-reason"); ok {
				reason = asString(v)
			}
			if v, ok := value.get("deadletter-description"); ok {
				desc = asString(v)
			}
			e.deadLetter(m, reason, desc, pm)
		default:
			return 400, "unknown disposition-status " + status, "com.microsoft:argument-error"
		}
	}
	return 200, "OK", ""
}

func (s *Server) reply(l *link, req *message, code int, desc, condition string, value any) {
	replyTo := asString(field(req.props, 4))
	var out *link
	for _, ss := range l.s.c.sessions {
		for _, x := range ss.links {
			if x.kind == kindRPCOut && x.target == replyTo {
				out = x
			}
		}
	}
	if out == nil {
		return
	}
	app := amqpMap{{"status-code", int32(code)}, {"status-description", desc}}
	if condition != "" {
		app = append(app, kv{"error-condition", symbol(condition)})
	}
	e := encoder{}
	e.value(perf(codeProperties, nil, nil, nil, nil, nil, field(req.props, 0)))
	e.value(described{desc: uint64(codeAppProperties), value: app})
	if value != nil {
		e.value(described{desc: uint64(0x77), value: value})
	}
	if out.credit == 0 {
		out.pendingRPC = append(out.pendingRPC, e.b)
		return
	}
	out.transfer(nil, true, e.b)
}
