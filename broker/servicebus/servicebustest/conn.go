package servicebustest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Performative and section descriptors (AMQP 1.0 part 2 "Transport",
// part 3 "Messaging", part 5 "Security").
const (
	codeOpen        = 0x10
	codeBegin       = 0x11
	codeAttach      = 0x12
	codeFlow        = 0x13
	codeTransfer    = 0x14
	codeDisposition = 0x15
	codeDetach      = 0x16
	codeEnd         = 0x17
	codeClose       = 0x18
	codeError       = 0x1d
	codeAccepted    = 0x24
	codeRejected    = 0x25
	codeReleased    = 0x26
	codeModified    = 0x27
	codeSource      = 0x28
	codeTarget      = 0x29

	codeSASLMechanisms = 0x40
	codeSASLInit       = 0x41
	codeSASLOutcome    = 0x44

	codeHeader         = 0x70
	codeDeliveryAnn    = 0x71
	codeMessageAnn     = 0x72
	codeProperties     = 0x73
	codeAppProperties  = 0x74
	codeData           = 0x75
	codeFooter         = 0x78
	batchMessageFormat = 0x80013700 // Service Bus's batch: each data section is one message
)

// maxFrame is the largest frame this server accepts; larger messages come
// in several transfer frames.
const maxFrame = 256 * 1024

var (
	protoAMQP = []byte{'A', 'M', 'Q', 'P', 0, 1, 0, 0}
	protoSASL = []byte{'A', 'M', 'Q', 'P', 3, 1, 0, 0}
)

// conn is one client connection. Its frames are read and handled on one
// goroutine under the server's lock; what it sends is queued and written
// by a writer goroutine, so the server never blocks on a slow client while
// it holds its lock.
type conn struct {
	s        *Server
	nc       net.Conn
	peerMax  int // the client's max-frame-size
	sessions map[uint16]*session

	outMu   sync.Mutex
	out     [][]byte
	outSig  chan struct{}
	done    chan struct{}
	closeMu sync.Once
}

func newConn(s *Server, nc net.Conn) *conn {
	return &conn{s: s, nc: nc, peerMax: 512, sessions: map[uint16]*session{},
		outSig: make(chan struct{}, 1), done: make(chan struct{})}
}

// close ends the connection at once; the server forgets its links (locked
// messages stay locked until their lock expires, as on Service Bus).
func (c *conn) close() {
	c.closeMu.Do(func() {
		close(c.done)
		c.nc.Close()
	})
}

// frame queues one frame of type typ (0 AMQP, 1 SASL) on channel ch.
func (c *conn) frame(typ byte, ch uint16, body any, payload []byte) {
	e := encoder{b: make([]byte, 8, 64+len(payload))}
	if body != nil {
		e.value(body)
	}
	e.b = append(e.b, payload...)
	binary.BigEndian.PutUint32(e.b, uint32(len(e.b)))
	e.b[4], e.b[5] = 2, typ
	binary.BigEndian.PutUint16(e.b[6:], ch)
	c.send(e.b)
}

// send queues b for the writer.
func (c *conn) send(b []byte) {
	c.outMu.Lock()
	c.out = append(c.out, b)
	c.outMu.Unlock()
	select {
	case c.outSig <- struct{}{}:
	default:
	}
}

func (c *conn) writer() {
	w := bufio.NewWriter(c.nc)
	for {
		select {
		case <-c.done:
			return
		case <-c.outSig:
		}
		c.outMu.Lock()
		out := c.out
		c.out = nil
		c.outMu.Unlock()
		for _, b := range out {
			if _, err := w.Write(b); err != nil {
				c.close()
				return
			}
		}
		if err := w.Flush(); err != nil {
			c.close()
			return
		}
	}
}

// keepAlive sends an empty frame every half of the client's idle time-out
// (AMQP 1.0 part 2, 2.4.5), so it never closes an idle connection.
func (c *conn) keepAlive(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			c.send([]byte{0, 0, 0, 8, 2, 0, 0, 0})
		}
	}
}

type rawFrame struct {
	typ  byte
	ch   uint16
	body []byte // after the extended header
}

func readFrame(r io.Reader) (rawFrame, error) {
	var h [8]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return rawFrame{}, err
	}
	size := binary.BigEndian.Uint32(h[:])
	doff := int(h[4]) * 4
	if size < 8 || size > maxFrame || doff < 8 || uint32(doff) > size {
		return rawFrame{}, fmt.Errorf("amqp: bad frame header (size %d, doff %d)", size, doff)
	}
	b := make([]byte, size-8)
	if _, err := io.ReadFull(r, b); err != nil {
		return rawFrame{}, err
	}
	return rawFrame{typ: h[5], ch: binary.BigEndian.Uint16(h[6:]), body: b[doff-8:]}, nil
}

// serve runs the connection: protocol headers, SASL ANONYMOUS (any
// mechanism is accepted: the server checks no credentials), then AMQP
// frames until either side closes.
func (c *conn) serve() {
	defer c.s.dropConn(c)
	defer c.close()
	go c.writer()
	r := bufio.NewReader(c.nc)
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return
	}
	if string(hdr[:]) == string(protoSASL) {
		c.nc.Write(protoSASL)
		c.frame(1, 0, perf(codeSASLMechanisms, array{symbol("ANONYMOUS"), symbol("MSSBCBS"), symbol("PLAIN")}), nil)
		f, err := readFrame(r)
		if err != nil || f.typ != 1 {
			return
		}
		c.frame(1, 0, perf(codeSASLOutcome, uint8(0)), nil)
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
	}
	if string(hdr[:]) != string(protoAMQP) {
		c.nc.Write(protoAMQP)
		return
	}
	c.send(append([]byte(nil), protoAMQP...))
	for {
		f, err := readFrame(r)
		if err != nil {
			return
		}
		if len(f.body) == 0 {
			continue // keep-alive
		}
		d := decoder{b: f.body}
		v, err := d.value()
		if err != nil {
			return
		}
		code, fields := descCode(v)
		if code == codeOpen {
			c.open(fields)
			continue
		}
		if code == codeClose {
			c.frame(0, 0, perf(codeClose), nil)
			return
		}
		c.s.mu.Lock()
		err = c.handle(f.ch, code, fields, f.body[d.i:])
		c.s.mu.Unlock()
		if err != nil {
			c.frame(0, 0, perf(codeClose, amqpError("amqp:internal-error", err.Error(), nil)), nil)
			return
		}
	}
}

func (c *conn) open(fields []any) {
	if n := asUint(field(fields, 2)); n >= 512 {
		c.peerMax = int(min(n, 1<<20))
	} else {
		c.peerMax = 1 << 16
	}
	if ms := asUint(field(fields, 4)); ms > 0 {
		go c.keepAlive(time.Duration(ms) * time.Millisecond / 2)
	}
	c.frame(0, 0, perf(codeOpen, "servicebustest", nil, uint32(maxFrame), uint16(255)), nil)
}

func amqpError(condition, description string, info amqpMap) described {
	var i any
	if info != nil {
		i = info
	}
	return perf(codeError, symbol(condition), description, i)
}

var errProtocol = errors.New("amqp: frame out of order")

// handle processes one frame of a session. Called with s.mu held.
func (c *conn) handle(ch uint16, code uint64, f []any, payload []byte) error {
	if code == codeBegin {
		s := &session{c: c, ch: ch, links: map[uint32]*link{}, unsettled: map[uint32]*delivery{},
			nextIncoming: uint32(asUint(field(f, 1)))}
		c.sessions[ch] = s
		c.frame(0, ch, perf(codeBegin, ch, uint32(0), uint32(1<<20), uint32(1<<20), uint32(1<<16)), nil)
		return nil
	}
	s := c.sessions[ch]
	if s == nil {
		return errProtocol
	}
	switch code {
	case codeEnd:
		s.end()
		delete(c.sessions, ch)
		c.frame(0, ch, perf(codeEnd), nil)
	case codeAttach:
		s.attach(f)
	case codeDetach:
		h := uint32(asUint(field(f, 0)))
		if l := s.links[h]; l != nil {
			l.detached()
			delete(s.links, h)
		}
		c.frame(0, ch, perf(codeDetach, h, true), nil)
	case codeFlow:
		s.flow(f)
	case codeTransfer:
		s.nextIncoming++
		s.transfer(f, payload)
	case codeDisposition:
		s.disposition(f)
	}
	return nil
}
