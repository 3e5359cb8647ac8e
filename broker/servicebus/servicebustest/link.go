package servicebustest

import (
	"strings"
	"time"

	"github.com/idemgo/idem/internal/amqptest"
)

// link is Service Bus's state of an AMQP link: the entity it is attached
// to and, for a session receiver, the session it holds or its pending
// accept-next.
type link struct {
	*amqptest.Link
	entity        *entity
	sess          *sbSession
	pendingAccept bool
	acceptTimer   *time.Timer
}

// delivery is a message the server sent on a PeekLock link, waiting for
// the client's disposition.
type delivery struct {
	m     *message
	token amqptest.UUID
}

// handler is the Service Bus behind the AMQP core. Its methods run under
// the core's lock.
type handler struct{ s *Server }

func linkOf(l *amqptest.Link) *link { x, _ := l.Data.(*link); return x }

func (h handler) Attach(al *amqptest.Link) {
	srv := h.s
	l := &link{Link: al}
	al.Data = l
	addr := l.Address
	var condition, description string
	switch l.Kind {
	case amqptest.KindRPCIn, amqptest.KindRPCOut:
		if addr == "$cbs" {
			break
		}
		path := ""
		if strings.HasSuffix(strings.ToLower(addr), "/$management") {
			path = addr[:len(addr)-len("/$management")]
			l.entity = srv.lookup(path)
		}
		if l.entity == nil && srv.topics[strings.ToLower(path)] == nil {
			condition, description = "amqp:not-found", "no entity "+addr
		}
	case amqptest.KindReceive:
		l.entity = srv.lookup(addr)
		if l.entity == nil {
			condition, description = "amqp:not-found", "no queue or subscription "+addr
			break
		}
		condition, description = l.attachReceiver()
		if condition == "" && (l.sess != nil || l.pendingAccept) {
			return // answered by the session, or waiting for one
		}
	case amqptest.KindSend:
		if srv.lookupSend(addr) == nil {
			condition, description = "amqp:not-found", "no queue or topic "+addr
		}
	}
	if condition != "" {
		l.Refuse(condition, description)
		return
	}
	l.Accept(nil, nil)
	if l.Kind == amqptest.KindReceive {
		l.entity.receivers = append(l.entity.receivers, l)
	}
}

func (h handler) Receive(l *amqptest.Link, format uint32, body []byte) amqptest.Described {
	return h.s.receive(l.Address, format, body)
}

func (h handler) Request(l *amqptest.Link, req *amqptest.Message) amqptest.Reply {
	return h.s.rpc(linkOf(l), req)
}

func (h handler) Flow(al *amqptest.Link) {
	if l := linkOf(al); l.entity != nil {
		l.entity.pump()
	}
}

func (h handler) Settle(_ *amqptest.Link, data any, state any) any {
	return h.s.settleDelivery(data.(*delivery), state)
}

// Detached forgets the link. Messages it holds locked stay locked until
// their lock expires (then they are delivered again with DeliveryCount +
// 1) or are settled on the entity's $management link by lock token, as on
// Service Bus.
func (h handler) Detached(al *amqptest.Link) {
	l := linkOf(al)
	if l.pendingAccept {
		l.entity.dropAccept(l)
	}
	if l.sess != nil && l.sess.holder == l {
		// A session receiver that closes gives its session back at once.
		l.entity.freeSession(l.sess)
	}
	if l.entity != nil && l.Kind == amqptest.KindReceive {
		rs := l.entity.receivers
		for i, r := range rs {
			if r == l {
				l.entity.receivers = append(rs[:i:i], rs[i+1:]...)
				break
			}
		}
	}
}

// receiverNamed returns the receive link of l's connection named name
// (a request's associated-link-name), or nil.
func receiverNamed(l *link, name string) *link {
	if x := l.ReceiverNamed(name); x != nil {
		return linkOf(x)
	}
	return nil
}

// attachReceiver checks a receiver's attach against its entity's
// sessions: a session receiver (one with a session filter) only on a
// session-enabled entity, and only session receivers there, as Service
// Bus refuses both (amqp:not-allowed, which the client reports at once,
// without retrying). A session receiver is attached by attachSession.
func (l *link) attachReceiver() (condition, description string) {
	e := l.entity
	filter, _ := amqptest.Field(l.SourceFields, 7).(amqptest.Map)
	v, isSession := filter.Get(sessionFilter)
	switch {
	case isSession && e.sessions == nil:
		return "amqp:not-allowed", "It is not possible for an entity that does not require sessions to create a sessionful message receiver: " + e.path + " has no sessions."
	case !isSession && e.sessions != nil:
		return "amqp:not-allowed", "It is not possible for an entity that requires sessions to create a non-sessionful message receiver: " + e.path + " requires sessions."
	case !isSession:
		return "", ""
	}
	var wanted any
	if dv, ok := v.(amqptest.Described); ok {
		wanted = dv.Value
	}
	timeout := defaultAcceptTimeout
	props, _ := amqptest.Field(l.AttachFields, 13).(amqptest.Map)
	if t, ok := props.Get("com.microsoft:timeout"); ok && amqptest.AsUint(t) > 0 {
		timeout = time.Duration(amqptest.AsUint(t)) * time.Millisecond
		// Answered a little ahead, so the answer beats the deadline of
		// the client's context that the timeout was computed from.
		timeout -= min(timeout/10, 100*time.Millisecond)
	}
	return e.attachSession(l, wanted, timeout)
}

// answerSession answers a session receiver's attach: its source's filter
// names the session it holds, its properties the session lock's end
// (com.microsoft:locked-until-utc, in .NET ticks), as Service Bus does.
func (l *link) answerSession() {
	l.pendingAccept = false
	src := append([]any(nil), l.SourceFields...)
	for len(src) < 8 {
		src = append(src, nil)
	}
	src[7] = amqptest.Pairs(amqptest.Symbol(sessionFilter), amqptest.Described{Desc: sessionFilterCode, Value: l.sess.id})
	l.Accept(amqptest.Perf(amqptest.CodeSource, src...),
		amqptest.Pairs(amqptest.Symbol("com.microsoft:locked-until-utc"), ticks(l.sess.lockedUntil)))
	l.entity.receivers = append(l.entity.receivers, l)
}
