package amqptest

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

// Performative descriptors (AMQP 1.0 part 2 "Transport", part 5
// "Security").
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

	codeSASLMechanisms = 0x40
	codeSASLInit       = 0x41
	codeSASLOutcome    = 0x44
)

// Outcome, terminus and message section descriptors (AMQP 1.0 part 3
// "Messaging").
const (
	CodeAccepted = 0x24
	CodeRejected = 0x25
	CodeReleased = 0x26
	CodeModified = 0x27
	CodeSource   = 0x28
	CodeTarget   = 0x29

	CodeHeader        = 0x70
	CodeDeliveryAnn   = 0x71
	CodeMessageAnn    = 0x72
	CodeProperties    = 0x73
	CodeAppProperties = 0x74
	CodeData          = 0x75
	CodeValue         = 0x77
	CodeFooter        = 0x78
)

// BatchMessageFormat is the message format of the batches the Azure
// clients send: each data section of the envelope is one message.
const BatchMessageFormat = 0x80013700

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

// close ends the connection at once; the server forgets its links.
func (c *conn) close() {
	c.closeMu.Do(func() {
		close(c.done)
		c.nc.Close()
	})
}

// frame queues one frame of type typ (0 AMQP, 1 SASL) on channel ch.
func (c *conn) frame(typ byte, ch uint16, body any, payload []byte) {
	e := Encoder{b: make([]byte, 8, 64+len(payload))}
	if body != nil {
		e.Value(body)
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
		c.frame(1, 0, Perf(codeSASLMechanisms, Array{Symbol("ANONYMOUS"), Symbol("MSSBCBS"), Symbol("PLAIN")}), nil)
		f, err := readFrame(r)
		if err != nil || f.typ != 1 {
			return
		}
		c.frame(1, 0, Perf(codeSASLOutcome, uint8(0)), nil)
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
		d := Decoder{b: f.body}
		v, err := d.Value()
		if err != nil {
			return
		}
		code, fields := DescCode(v)
		if code == codeOpen {
			c.open(fields)
			continue
		}
		if code == codeClose {
			c.frame(0, 0, Perf(codeClose), nil)
			return
		}
		c.s.mu.Lock()
		err = c.handle(f.ch, code, fields, f.body[d.i:])
		c.s.mu.Unlock()
		if err != nil {
			c.frame(0, 0, Perf(codeClose, Error("amqp:internal-error", err.Error(), nil)), nil)
			return
		}
	}
}

func (c *conn) open(fields []any) {
	if n := AsUint(Field(fields, 2)); n >= 512 {
		c.peerMax = int(min(n, 1<<20))
	} else {
		c.peerMax = 1 << 16
	}
	if ms := AsUint(Field(fields, 4)); ms > 0 {
		go c.keepAlive(time.Duration(ms) * time.Millisecond / 2)
	}
	c.frame(0, 0, Perf(codeOpen, c.s.name, nil, uint32(maxFrame), uint16(255)), nil)
}

// Error is an AMQP error: its condition, description and info (nil:
// none).
func Error(condition, description string, info Map) Described {
	var i any
	if info != nil {
		i = info
	}
	return Perf(codeError, Symbol(condition), description, i)
}

var errProtocol = errors.New("amqp: frame out of order")

// handle processes one frame of a session. Called with s.mu held.
func (c *conn) handle(ch uint16, code uint64, f []any, payload []byte) error {
	if code == codeBegin {
		s := &session{c: c, ch: ch, links: map[uint32]*Link{}, unsettled: map[uint32]*delivery{}, detaching: map[uint32]bool{},
			nextIncoming: uint32(AsUint(Field(f, 1)))}
		c.sessions[ch] = s
		c.frame(0, ch, Perf(codeBegin, ch, uint32(0), uint32(1<<20), uint32(1<<20), uint32(1<<16)), nil)
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
		c.frame(0, ch, Perf(codeEnd), nil)
	case codeAttach:
		s.attach(f)
	case codeDetach:
		h := uint32(AsUint(Field(f, 0)))
		if s.detaching[h] {
			delete(s.detaching, h) // the client's answer to the server's detach
			return nil
		}
		if l := s.links[h]; l != nil {
			s.detached(l)
		}
		c.frame(0, ch, Perf(codeDetach, h, true), nil)
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
