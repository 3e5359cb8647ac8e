package amqptest

import "strings"

// LinkKind is what a link carries.
type LinkKind int

// The kinds of link.
const (
	KindSend    LinkKind = iota // the client sends messages to a node
	KindReceive                 // the client receives a node's messages
	KindRPCIn                   // the client sends requests to $cbs or a $management node
	KindRPCOut                  // the client receives the replies
)

// session is one AMQP session of a connection. All its state is guarded
// by the server's lock.
type session struct {
	c            *conn
	ch           uint16
	links        map[uint32]*Link // by handle (the server answers with the client's handle)
	unsettled    map[uint32]*delivery
	detaching    map[uint32]bool // handles the server detached, until the client's detach answers
	nextIncoming uint32          // the next transfer id expected from the client
	nextOutgoing uint32          // the next transfer id the server sends
	nextDelivery uint32
}

// Link is one link a client attached. The server uses the client's
// handle as its own, which AMQP allows (handles are chosen per
// direction). Its fields are read under the server's lock.
type Link struct {
	s      *session
	Name   string
	Handle uint32
	Kind   LinkKind
	// Address is the node's address as attached: the source's for a
	// link the client receives on, else the target's.
	Address string
	// Target is the client's address on a KindRPCOut link (where its
	// replies go).
	Target string
	// Settled: the client asked for settled transfers (ReceiveAndDelete
	// for a receiver, replies on an RPC link).
	Settled bool
	// AttachFields are the client's attach, SourceFields its source's.
	AttachFields []any
	SourceFields []any
	// Data is the broker's own state of the link.
	Data any

	accepted bool

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
}

// delivery is a message the server sent unsettled, waiting for the
// client's disposition.
type delivery struct {
	l    *Link
	data any
}

const senderCredit = 1000

// Credit is the credit the client gave on a link it receives on.
func (l *Link) Credit() uint32 { return l.credit }

// ReceiverNamed returns the receive link of l's connection whose name is
// name (a management request's associated-link-name), or nil.
func (l *Link) ReceiverNamed(name string) *Link {
	for _, ss := range l.s.c.sessions {
		for _, x := range ss.links {
			if x.Kind == KindReceive && x.Name == name {
				return x
			}
		}
	}
	return nil
}

func (s *session) end() {
	for _, l := range s.links {
		s.detached(l)
	}
}

// detached forgets l and the deliveries it waits on, and tells the
// handler.
func (s *session) detached(l *Link) {
	delete(s.links, l.Handle)
	for id, d := range s.unsettled {
		if d.l == l {
			delete(s.unsettled, id)
		}
	}
	l.credit = 0
	l.accepted = false
	s.c.s.h.Detached(l)
}

func (s *session) attach(f []any) {
	name := AsString(Field(f, 0))
	h := uint32(AsUint(Field(f, 1)))
	clientReceives := AsBool(Field(f, 2))
	source, target := Field(f, 5), Field(f, 6)
	_, src := DescCode(source)
	_, tgt := DescCode(target)
	srcAddr, tgtAddr := AsString(Field(src, 0)), AsString(Field(tgt, 0))

	l := &Link{s: s, Name: name, Handle: h, AttachFields: f, SourceFields: src}
	addr := tgtAddr
	if clientReceives {
		addr = srcAddr
		l.Settled = AsUint(Field(f, 3)) == 1
	}
	l.Address = addr
	switch {
	case addr == "$cbs" || addr == "$management" || strings.HasSuffix(strings.ToLower(addr), "/$management"):
		l.Kind = KindRPCIn
		if clientReceives {
			l.Kind, l.Target = KindRPCOut, tgtAddr
		}
	case clientReceives:
		l.Kind = KindReceive
	default:
		l.Kind = KindSend
	}
	s.links[h] = l // detachable while the handler decides
	s.c.s.h.Attach(l)
}

// Accept answers the client's attach: with its source as sent when
// source is nil, and with the link properties props (nil: none).
func (l *Link) Accept(source any, props Map) {
	f, s := l.AttachFields, l.s
	if s.links[l.Handle] != l {
		return // detached meanwhile
	}
	clientReceives := AsBool(Field(f, 2))
	if source == nil {
		source = Field(f, 5)
	}
	var initial, p any
	if clientReceives {
		initial = uint32(0)
	}
	if props != nil {
		p = props
	}
	s.c.frame(0, s.ch, Perf(codeAttach, l.Name, l.Handle, !clientReceives, Field(f, 3), Field(f, 4), source, Field(f, 6),
		nil, nil, initial, s.c.s.maxSize, nil, nil, p), nil)
	l.accepted = true
	if !clientReceives {
		l.peerCount = uint32(AsUint(Field(f, 9)))
		l.grant()
	}
}

// Refuse answers an attach with no terminus, then detaches it with the
// error (AMQP 1.0 part 2, 2.6.3).
func (l *Link) Refuse(condition, description string) {
	f, s := l.AttachFields, l.s
	if s.links[l.Handle] != l {
		return
	}
	s.c.frame(0, s.ch, Perf(codeAttach, l.Name, l.Handle, !AsBool(Field(f, 2)), Field(f, 3), Field(f, 4)), nil)
	s.c.frame(0, s.ch, Perf(codeDetach, l.Handle, true, Error(condition, description, nil)), nil)
	delete(s.links, l.Handle)
	s.detaching[l.Handle] = true
}

// Detach closes an accepted link from the server's side with the error
// (as Event Hubs detaches a receiver whose partition another took), and
// tells the handler it is gone.
func (l *Link) Detach(condition, description string) {
	s := l.s
	if s.links[l.Handle] != l {
		return
	}
	s.c.frame(0, s.ch, Perf(codeDetach, l.Handle, true, Error(condition, description, nil)), nil)
	s.detached(l)
	s.detaching[l.Handle] = true
}

// grant tops the client's credit on a link the server receives on back up
// to senderCredit.
func (l *Link) grant() {
	if l.granted > senderCredit/2 {
		return
	}
	l.granted = senderCredit
	s := l.s
	s.c.frame(0, s.ch, Perf(codeFlow, s.nextIncoming, uint32(1<<20), s.nextOutgoing, uint32(1<<20),
		l.Handle, l.peerCount, l.granted), nil)
}

func (s *session) flow(f []any) {
	hv := Field(f, 4)
	if hv == nil {
		return // session flow: the server's windows are wide enough
	}
	l := s.links[uint32(AsUint(hv))]
	if l == nil || !l.accepted || (l.Kind != KindReceive && l.Kind != KindRPCOut) {
		return
	}
	count := l.deliveryCount
	if dc := Field(f, 5); dc != nil {
		count = uint32(AsUint(dc))
	}
	l.credit = count + uint32(AsUint(Field(f, 6))) - l.deliveryCount
	if l.Kind == KindRPCOut {
		for len(l.pendingRPC) > 0 && l.credit > 0 {
			b := l.pendingRPC[0]
			l.pendingRPC = l.pendingRPC[1:]
			l.Transfer(nil, true, b)
		}
	} else {
		s.c.s.h.Flow(l)
	}
	if s.links[l.Handle] != l {
		return // detached by the handler
	}
	if AsBool(Field(f, 8)) && l.credit > 0 { // drain: nothing more to send
		l.deliveryCount += l.credit
		l.credit = 0
		s.c.frame(0, s.ch, Perf(codeFlow, s.nextIncoming, uint32(1<<20), s.nextOutgoing, uint32(1<<20),
			l.Handle, l.deliveryCount, uint32(0), nil, true), nil)
	} else if AsBool(Field(f, 9)) {
		s.c.frame(0, s.ch, Perf(codeFlow, s.nextIncoming, uint32(1<<20), s.nextOutgoing, uint32(1<<20),
			l.Handle, l.deliveryCount, l.credit), nil)
	}
}

// Transfer sends one delivery on l, split into frames the client takes,
// and returns its delivery id. tag nil: one made of the id.
func (l *Link) Transfer(tag []byte, settled bool, payload []byte) uint32 {
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
		var p Described
		if first {
			p = Perf(codeTransfer, l.Handle, id, tag, uint32(0), settled, more)
		} else {
			p = Perf(codeTransfer, l.Handle, nil, nil, nil, nil, more)
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

// Deliver sends payload unsettled; the client's disposition of it comes
// to the handler's Settle with data.
func (l *Link) Deliver(tag, payload []byte, data any) {
	id := l.Transfer(tag, false, payload)
	l.s.unsettled[id] = &delivery{l: l, data: data}
}

func (s *session) transfer(f []any, payload []byte) {
	l := s.links[uint32(AsUint(Field(f, 0)))]
	if l == nil || !l.accepted || (l.Kind != KindSend && l.Kind != KindRPCIn) {
		return
	}
	if !l.inStarted {
		l.inStarted = true
		l.inID = uint32(AsUint(Field(f, 1)))
		l.inFormat = uint32(AsUint(Field(f, 3)))
		l.inSettled = AsBool(Field(f, 4))
		l.in = l.in[:0]
	}
	l.in = append(l.in, payload...)
	if AsBool(Field(f, 5)) { // more
		return
	}
	l.inStarted = false
	l.peerCount++
	l.granted--
	body := append([]byte(nil), l.in...)
	var state Described
	if l.Kind == KindSend {
		state = s.c.s.h.Receive(l, l.inFormat, body)
	} else {
		s.c.s.rpc(l, body)
		state = Perf(CodeAccepted)
	}
	if !l.inSettled {
		s.c.frame(0, s.ch, Perf(codeDisposition, true, l.inID, nil, true, state), nil)
	}
	if s.links[l.Handle] == l {
		l.grant()
	}
}

func (s *session) disposition(f []any) {
	if !AsBool(Field(f, 0)) {
		return // the client settling its own transfers
	}
	first := uint32(AsUint(Field(f, 1)))
	last := first
	if v := Field(f, 2); v != nil {
		last = uint32(AsUint(v))
	}
	settled := AsBool(Field(f, 3))
	state := Field(f, 4)
	for id := first; ; id++ {
		if d := s.unsettled[id]; d != nil {
			delete(s.unsettled, id)
			res := s.c.s.h.Settle(d.l, d.data, state)
			if !settled {
				s.c.frame(0, s.ch, Perf(codeDisposition, false, id, nil, true, res), nil)
			}
		}
		if id == last {
			break
		}
	}
}
