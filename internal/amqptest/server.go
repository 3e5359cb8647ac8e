// Package amqptest is the AMQP 1.0 server core that the in-process test
// brokers speaking AMQP (servicebustest, eventhubstest) share: the frame
// and type codec, connections (SASL, open, keep-alive, close), sessions,
// links with their flow control, transfers split to the client's frame
// size, dispositions, claims-based security ($cbs put-token, any token
// accepted) and the request-reply of management links. What a link
// carries, the broker decides through a Handler.
//
// Every frame is handled, and every Handler method called, under the
// server's lock; timers armed with At run under it too.
package amqptest

import (
	"net"
	"sync"
	"time"
)

// Handler is the broker behind a Server. Every method is called with the
// server's lock held.
type Handler interface {
	// Attach decides a link the client attaches (Link.Kind says which):
	// it answers with Link.Accept or Link.Refuse, at once or later (a
	// link left waiting can be detached by the client meanwhile).
	Attach(l *Link)
	// Receive stores what the client sent on a KindSend link: one
	// message in the given message format (a batch when it is
	// BatchMessageFormat), and returns the delivery state to answer
	// with (Perf(CodeAccepted), or Perf(CodeRejected, Error(...))).
	Receive(l *Link, format uint32, body []byte) Described
	// Request answers a request on a management link (put-token on any
	// of them is answered by the server itself: any token is accepted).
	Request(l *Link, req *Message) Reply
	// Flow tells that the client's credit on a KindReceive link changed.
	Flow(l *Link)
	// Settle applies the client's disposition (state) of a delivery sent
	// with Link.Deliver and returns the state to answer with.
	Settle(l *Link, data any, state any) any
	// Detached tells that a link not refused is gone (accepted or still
	// waiting): detached by either side, its session ended or its
	// connection lost.
	Detached(l *Link)
}

// Server listens on a loopback port and serves AMQP 1.0 connections to
// its Handler.
type Server struct {
	ln      net.Listener
	name    string
	h       Handler
	maxSize uint64

	mu     sync.Mutex
	conns  map[*conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// NewServer starts a server on 127.0.0.1 on a free port. name is the
// container id it opens connections with; maxMessageSize the largest
// message its links take (the client reads it from the attach).
func NewServer(name string, h Handler, maxMessageSize uint64) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, name: name, h: h, maxSize: maxMessageSize, conns: map[*conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Lock takes the server's lock, under which every frame is handled.
func (s *Server) Lock() { s.mu.Lock() }

// Unlock releases the server's lock.
func (s *Server) Unlock() { s.mu.Unlock() }

// Closed reports whether Close was called. Call it with the lock held.
func (s *Server) Closed() bool { return s.closed }

// Close closes every connection and the listener, and waits for their
// goroutines. Timers armed with At do nothing once it was called.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.close()
	}
	s.mu.Unlock()
	err := s.ln.Close()
	s.wg.Wait()
	return err
}

// DropConnections closes every client connection at once, as a network
// failure would; clients reconnect on their next operation.
func (s *Server) DropConnections() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.close()
	}
}

// At stops old (if any) and returns a timer that runs fn at t under the
// server's lock, unless the server has closed by then.
func (s *Server) At(old *time.Timer, t time.Time, fn func()) *time.Timer {
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

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		c := newConn(s, nc)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			c.serve()
		}()
	}
}

func (s *Server) dropConn(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ss := range c.sessions {
		ss.end()
	}
	delete(s.conns, c)
}
