package servicebustest

import (
	"strings"
	"time"
)

type linkKind int

const (
	kindSend    linkKind = iota // the client sends messages to an entity
	kindReceive                 // the client receives an entity's messages
	kindRPCIn                   // the client sends requests to $cbs or <entity>/$management
	kindRPCOut                  // the client receives the replies
)

// session is one AMQP session of a connection. All its state is guarded
// by the server's lock.
type session struct {
	c            *conn
	ch           uint16
	links        map[uint32]*link // by handle (the server answers with the client's handle)
	unsettled    map[uint32]*delivery
	nextIncoming uint32 // the next transfer id expected from the client
	nextOutgoing uint32 // the next transfer id the server sends
	nextDelivery uint32
}

// link is one attached link. The server uses the client's handle as its
// own, which AMQP allows (handles are chosen per direction).
type link struct {
	s       *session
	name    string
	handle  uint32
	kind    linkKind
	address string // the entity's path as attached, or the node
	target  string // for kindRPCOut: the client's reply address
	entity  *entity
	// settled: the client asked for settled transfers (ReceiveAndDelete
	// for a receiver, replies on an RPC link).
	settled bool

	// The server as sender: AMQP 1.0 part 2, 2.6.7 flow control.
	deliveryCount uint32
	credit        uint32
	pendingRPC    [][]byte // replies waiting for credit

	// The server as receiver.
	peerCount uint32 // the client's delivery-count as the server grants from it
	granted   uint32
	in        []byte // a transfer still arriving (more = true)
	inID      uint32
	inFormat  uint32
	inSettled bool
	inStarted bool

	// A session receiver: the session it holds, or its pending
	// accept-next, and what its attach is answered with.
	sess          *sbSession
	pendingAccept bool
	acceptTimer   *time.Timer
	attachFields  []any // the client's attach
	srcFields     []any // its source's fields
}

// delivery is a message the server sent on a PeekLock link, waiting for
// the client's disposition.
type delivery struct {
	l     *link
	m     *message
	token uuid
}

const senderCredit = 1000

func (s *session) end() {
	for h, l := range s.links {
		l.detached()
		delete(s.links, h)
	}
}

func (s *session) attach(f []any) {
	name := asString(field(f, 0))
	h := uint32(asUint(field(f, 1)))
	clientReceives := asBool(field(f, 2))
	sndSettle, rcvSettle := field(f, 3), field(f, 4)
	source, target := field(f, 5), field(f, 6)
	_, src := descCode(source)
	_, tgt := descCode(target)
	srcAddr, tgtAddr := asString(field(src, 0)), asString(field(tgt, 0))

	l := &link{s: s, name: name, handle: h}
	addr := tgtAddr
	if clientReceives {
		addr = srcAddr
		l.settled = asUint(sndSettle) == 1
	}
	l.address = addr
	srv := s.c.s
	var condition, description string
	switch {
	case addr == "$cbs":
		l.kind = kindRPCIn
	case strings.HasSuffix(strings.ToLower(addr), "/$management"):
		l.kind = kindRPCIn
		l.entity = srv.lookup(addr[:len(addr)-len("/$management")])
		if l.entity == nil && srv.topics[strings.ToLower(addr[:len(addr)-len("/$management")])] == nil {
			condition, description = "amqp:not-found", "no entity "+addr
		}
	default:
		if clientReceives {
			l.kind = kindReceive
			l.entity = srv.lookup(addr)
			if l.entity == nil {
				condition, description = "amqp:not-found", "no queue or subscription "+addr
			}
		} else {
			l.kind = kindSend
			if srv.lookupSend(addr) == nil {
				condition, description = "amqp:not-found", "no queue or topic "+addr
			}
		}
	}
	if clientReceives && l.kind == kindRPCIn {
		l.kind = kindRPCOut
		l.target = tgtAddr
	}
	l.attachFields, l.srcFields = f, src
	if condition == "" && l.kind == kindReceive {
		condition, description = l.attachReceiver()
		if condition == "" && (l.sess != nil || l.pendingAccept) {
			return // answered by the session, or waiting for one
		}
	}
	if condition != "" {
		l.refuse(condition, description)
		return
	}
	var initial any
	if clientReceives {
		initial = uint32(0)
	}
	s.c.frame(0, s.ch, perf(codeAttach, name, h, !clientReceives, sndSettle, rcvSettle, source, target,
		nil, nil, initial, uint64(maxMessageSize)), nil)
	s.links[h] = l
	if !clientReceives {
		l.peerCount = uint32(asUint(field(f, 9)))
		l.grant()
	} else if l.kind == kindReceive {
		l.entity.receivers = append(l.entity.receivers, l)
	}
}

// attachReceiver checks a receiver's attach against its entity's
// sessions: a session receiver (one with a session filter) only on a
// session-enabled entity, and only session receivers there, as Service
// Bus refuses both (amqp:not-allowed, which the client reports at once,
// without retrying). A session receiver is attached by attachSession.
func (l *link) attachReceiver() (condition, description string) {
	e := l.entity
	filter, _ := field(l.srcFields, 7).(amqpMap)
	v, isSession := filter.get(sessionFilter)
	switch {
	case isSession && e.sessions == nil:
		return "amqp:not-allowed", "It is not possible for an entity that does not require sessions to create a sessionful message receiver: " + e.path + " has no sessions."
	case !isSession && e.sessions != nil:
		return "amqp:not-allowed", "It is not possible for an entity that requires sessions to create a non-sessionful message receiver: " + e.path + " requires sessions."
	case !isSession:
		return "", ""
	}
	l.s.links[l.handle] = l // detachable while it waits
	var wanted any
	if dv, ok := v.(described); ok {
		wanted = dv.value
	}
	timeout := defaultAcceptTimeout
	props, _ := field(l.attachFields, 13).(amqpMap)
	if t, ok := props.get("com.microsoft:timeout"); ok && asUint(t) > 0 {
		timeout = time.Duration(asUint(t)) * time.Millisecond
		// Answered a little ahead, so the answer beats the deadline of
		// the client's context that the timeout was computed from.
		timeout -= min(timeout/10, 100*time.Millisecond)
	}
	condition, description = e.attachSession(l, wanted, timeout)
	if condition != "" {
		delete(l.s.links, l.handle)
	}
	return condition, description
}

// answerSession answers a session receiver's attach: its source's filter
// names the session it holds, its properties the session lock's end
// (com.microsoft:locked-until-utc, in .NET ticks), as Service Bus does.
func (l *link) answerSession() {
	l.pendingAccept = false
	src := append([]any(nil), l.srcFields...)
	for len(src) < 8 {
		src = append(src, nil)
	}
	src[7] = amqpMap{{symbol(sessionFilter), described{desc: sessionFilterCode, value: l.sess.id}}}
	f := l.attachFields
	s := l.s
	s.c.frame(0, s.ch, perf(codeAttach, l.name, l.handle, false, field(f, 3), field(f, 4), perf(codeSource, src...), field(f, 6),
		nil, nil, uint32(0), uint64(maxMessageSize), nil, nil,
		amqpMap{{symbol("com.microsoft:locked-until-utc"), ticks(l.sess.lockedUntil)}}), nil)
	s.links[l.handle] = l
	l.entity.receivers = append(l.entity.receivers, l)
}

// refuse answers an attach with no terminus, then detaches it with the
// error (AMQP 1.0 part 2, 2.6.3).
func (l *link) refuse(condition, description string) {
	f, s := l.attachFields, l.s
	s.c.frame(0, s.ch, perf(codeAttach, l.name, l.handle, !asBool(field(f, 2)), field(f, 3), field(f, 4)), nil)
	s.c.frame(0, s.ch, perf(codeDetach, l.handle, true, amqpError(condition, description, nil)), nil)
	delete(s.links, l.handle)
}

// grant tops the client's credit on a link the server receives on back up
// to senderCredit.
func (l *link) grant() {
	if l.granted > senderCredit/2 {
		return
	}
	l.granted = senderCredit
	s := l.s
	s.c.frame(0, s.ch, perf(codeFlow, s.nextIncoming, uint32(1<<20), s.nextOutgoing, uint32(1<<20),
		l.handle, l.peerCount, l.granted), nil)
}

// detached forgets the link. Messages it holds locked stay locked until
// their lock expires (then they are delivered again with DeliveryCount +
// 1) or are settled on the entity's $management link by lock token, as on
// Service Bus.
func (l *link) detached() {
	if l.pendingAccept {
		l.entity.dropAccept(l)
	}
	if l.sess != nil && l.sess.holder == l {
		// A session receiver that closes gives its session back at once.
		l.entity.freeSession(l.sess)
	}
	if l.entity != nil && l.kind == kindReceive {
		rs := l.entity.receivers
		for i, r := range rs {
			if r == l {
				l.entity.receivers = append(rs[:i:i], rs[i+1:]...)
				break
			}
		}
	}
	for id, d := range l.s.unsettled {
		if d.l == l {
			delete(l.s.unsettled, id)
		}
	}
	l.credit = 0
}

func (s *session) flow(f []any) {
	hv := field(f, 4)
	if hv == nil {
		return // session flow: the server's windows are wide enough
	}
	l := s.links[uint32(asUint(hv))]
	if l == nil || (l.kind != kindReceive && l.kind != kindRPCOut) {
		return
	}
	count := l.deliveryCount
	if dc := field(f, 5); dc != nil {
		count = uint32(asUint(dc))
	}
	l.credit = count + uint32(asUint(field(f, 6))) - l.deliveryCount
	if l.kind == kindRPCOut {
		for len(l.pendingRPC) > 0 && l.credit > 0 {
			b := l.pendingRPC[0]
			l.pendingRPC = l.pendingRPC[1:]
			l.transfer(nil, true, b)
		}
	} else if l.entity != nil {
		l.entity.pump()
	}
	if asBool(field(f, 8)) && l.credit > 0 { // drain: nothing more to send
		l.deliveryCount += l.credit
		l.credit = 0
		s.c.frame(0, s.ch, perf(codeFlow, s.nextIncoming, uint32(1<<20), s.nextOutgoing, uint32(1<<20),
			l.handle, l.deliveryCount, uint32(0), nil, true), nil)
	} else if asBool(field(f, 9)) {
		s.c.frame(0, s.ch, perf(codeFlow, s.nextIncoming, uint32(1<<20), s.nextOutgoing, uint32(1<<20),
			l.handle, l.deliveryCount, l.credit), nil)
	}
}

// transfer sends one delivery on l, split into frames the client takes,
// and returns its delivery id.
func (l *link) transfer(tag []byte, settled bool, payload []byte) uint32 {
	s := l.s
	id := s.nextDelivery
	s.nextDelivery++
	l.deliveryCount++
	if l.credit > 0 {
		l.credit--
	}
	if tag == nil {
		tag = []byte{byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)}
	}
	chunk := s.c.peerMax - 128 - len(tag)
	first := true
	for {
		n := min(chunk, len(payload))
		more := n < len(payload)
		var p described
		if first {
			p = perf(codeTransfer, l.handle, id, tag, uint32(0), settled, more)
		} else {
			p = perf(codeTransfer, l.handle, nil, nil, nil, nil, more)
		}
		s.nextOutgoing++
		s.c.frame(0, s.ch, p, payload[:n])
		payload = payload[n:]
		first = false
		if !more {
			return id
		}
	}
}

func (s *session) transfer(f []any, payload []byte) {
	l := s.links[uint32(asUint(field(f, 0)))]
	if l == nil || (l.kind != kindSend && l.kind != kindRPCIn) {
		return
	}
	if !l.inStarted {
		l.inStarted = true
		l.inID = uint32(asUint(field(f, 1)))
		l.inFormat = uint32(asUint(field(f, 3)))
		l.inSettled = asBool(field(f, 4))
		l.in = l.in[:0]
	}
	l.in = append(l.in, payload...)
	if asBool(field(f, 5)) { // more
		return
	}
	l.inStarted = false
	l.peerCount++
	l.granted--
	body := append([]byte(nil), l.in...)
	var state described
	if l.kind == kindSend {
		state = s.c.s.receive(l.address, l.inFormat, body)
	} else {
		s.c.s.rpc(l, body)
		state = perf(codeAccepted)
	}
	if !l.inSettled {
		s.c.frame(0, s.ch, perf(codeDisposition, true, l.inID, nil, true, state), nil)
	}
	l.grant()
}

func (s *session) disposition(f []any) {
	if !asBool(field(f, 0)) {
		return // the client settling its own transfers
	}
	first := uint32(asUint(field(f, 1)))
	last := first
	if v := field(f, 2); v != nil {
		last = uint32(asUint(v))
	}
	settled := asBool(field(f, 3))
	state := field(f, 4)
	for id := first; ; id++ {
		if d := s.unsettled[id]; d != nil {
			delete(s.unsettled, id)
			res := s.c.s.settleDelivery(d, state)
			if !settled {
				s.c.frame(0, s.ch, perf(codeDisposition, false, id, nil, true, res), nil)
			}
		}
		if id == last {
			break
		}
	}
}
