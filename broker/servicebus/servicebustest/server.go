// Package servicebustest is an in-process Azure Service Bus for tests: a
// small server on a loopback port that speaks enough AMQP 1.0, claims-based
// security ($cbs) and the Service Bus management protocol
// (<entity>/$management) for the real, unmodified azservicebus client to
// send, receive and settle against it, as kfake is for Kafka. No Go
// package offers one, and Microsoft's emulator is a container that needs
// SQL Server.
//
//	srv, err := servicebustest.NewServer()
//	defer srv.Close()
//	srv.CreateQueue("orders", servicebustest.QueueOptions{LockDuration: 5 * time.Second})
//	client, err := azservicebus.NewClientFromConnectionString(srv.ConnectionString(), nil)
//
// Production code runs against Azure unchanged: only the connection string
// differs (it carries UseDevelopmentEmulator=true, which turns TLS off).
//
// # Fidelity
//
// Each documented Service Bus behaviour it models, and the test (through
// the real azservicebus client) that holds it to it:
//
//	Behaviour                                                        Test
//	send, PeekLock receive, complete; sequence number, enqueued      TestSendReceiveComplete
//	  time, locked-until, application properties as sent
//	abandon: available again, DeliveryCount + 1; at MaxDeliveryCount TestAbandonRedeliversThenDeadLetters
//	  to $DeadLetterQueue, MaxDeliveryCountExceeded, no DeadLetterSource
//	dead-letter with DeadLetterReason, DeadLetterErrorDescription    TestDeadLetterWithReasonAndProperties
//	  and the properties to modify
//	lock expiry: available again, DeliveryCount + 1                  TestLockExpiryRedelivers
//	renew-lock; lock lost (CodeLockLost) once it ran out or settled  TestRenewLock
//	duplicate detection by MessageID within the window               TestDuplicateDetection
//	topics: every subscription gets every message                    TestTopicSubscriptions
//	batches; messages over several frames                            TestBatchAndManyMessages
//	peek from a sequence number, locked messages included            TestPeek
//	  (a session receiver's: its session's only)                     TestSessionPeek
//	sessions: a session receiver gets only its session's messages,   TestSessionFilterAndAcceptNext,
//	  in order; accept by id and accept-next                         TestSessionIsolation
//	a locked session cannot be accepted elsewhere                    TestSessionLockedElsewhere
//	  (session-cannot-be-locked); a closed receiver frees its session
//	session lock renewal; a lock that runs out frees the session,    TestSessionLockRenewalAndExpiry
//	  its messages again with DeliveryCount + 1
//	accept-next with no session waits, then CodeTimeout              TestAcceptNextTimesOut
//	session state get / set, kept across accepts                     TestSessionState
//	a session receiver on an entity without sessions, a plain        TestSessionRefusals
//	  receiver on a session entity, a message without SessionID to
//	  a session entity: refused at once (amqp:not-allowed)
//	ScheduledEnqueueTime and ScheduleMessages: not delivered before, TestScheduledMessages
//	  counted and peeked as scheduled; CancelScheduledMessages
//	TimeToLive (the message's, or the entity's default when shorter):TestTimeToLive
//	  an expired message is never delivered; dropped, or dead-lettered
//	  with TTLExpiredException when the entity dead-letters on expiry
//	deferral: not delivered again; received by sequence number,      TestDeferral
//	  locked, settled through $management; an unknown sequence
//	  number fails at once
//	operations it does not model: refused within a second           TestUnmodelledRefusedAtOnce
//
// Lock tokens are the delivery tag in .NET GUID byte order, as Service
// Bus sends them. A receive link that closes leaves its locked messages
// locked until their lock expires (they may still be settled through
// $management by lock token); a session receiver that closes frees its
// session at once, its locked messages available again with DeliveryCount
// + 1. A settlement after a session's lock ran out is refused with
// com.microsoft:session-lock-lost, as Service Bus refuses it; the client
// (azservicebus v1.11) then recovers its link and may report the
// settlement as done although nothing was settled: the message comes
// back to the session's next holder. ReceiveAndDelete receivers are served (no test of their
// own here). Any SASL mechanism and any token are accepted.
//
// # What it refuses
//
// What it does not model is refused at once with an error naming it,
// never accepted with other semantics and never answered in a way the
// client takes for a lost connection (which it would retry for about 40
// seconds): a management operation it does not model gets status 404
// with amqp:not-implemented (the client's non-retryable
// *azservicebus.Error, CodeNotFound, whose text names the operation).
// Refused so: listing sessions (get-message-sessions), ScheduleMessages
// on a topic, subscription rules (add-rule, remove-rule, enumerate-rules)
// and every other management operation not in the table. Not modelled
// at all: partitioned entities, transactions, auto-forwarding (so
// DeadLetterSource is never set), subscription filters (every
// subscription gets every message), Premium features, quotas and
// throttling, TLS and WebSockets, and the administration (ATOM, HTTPS)
// API, which it does not serve: entities are made with CreateQueue,
// CreateTopic and CreateSubscription. State lives in memory only.
package servicebustest

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemgo/idem/internal/amqptest"
)

// Defaults of Service Bus for a new entity.
const (
	DefaultLockDuration     = time.Minute
	DefaultMaxDeliveryCount = 10
	DefaultDuplicateWindow  = 10 * time.Minute
)

const maxMessageSize = 1 << 20

// QueueOptions configure a queue or a subscription. The zero value takes
// Service Bus's defaults.
type QueueOptions struct {
	LockDuration     time.Duration // default DefaultLockDuration
	MaxDeliveryCount int           // default DefaultMaxDeliveryCount
	// RequiresDuplicateDetection drops a message whose MessageId was sent
	// to the entity within DuplicateDetectionWindow (queues and topics
	// only; a subscription takes its topic's).
	RequiresDuplicateDetection bool
	DuplicateDetectionWindow   time.Duration // default DefaultDuplicateWindow
	// RequiresSession makes the queue or subscription session-enabled:
	// every message must carry a SessionID, and only session receivers
	// (AcceptSession, AcceptNextSession) may receive from it.
	RequiresSession bool
	// DefaultMessageTimeToLive is the time to live of a message sent
	// without one (default: none, a message never expires). A message's
	// own TimeToLive is kept when it is shorter.
	DefaultMessageTimeToLive time.Duration
	// DeadLetteringOnMessageExpiration moves an expired message to the
	// dead-letter queue (reason TTLExpiredException) instead of dropping
	// it.
	DeadLetteringOnMessageExpiration bool
}

func (o QueueOptions) withDefaults() QueueOptions {
	if o.LockDuration <= 0 {
		o.LockDuration = DefaultLockDuration
	}
	if o.MaxDeliveryCount <= 0 {
		o.MaxDeliveryCount = DefaultMaxDeliveryCount
	}
	if o.DuplicateDetectionWindow <= 0 {
		o.DuplicateDetectionWindow = DefaultDuplicateWindow
	}
	return o
}

// Server is an in-process Service Bus namespace listening on a loopback
// port. Its methods are safe for concurrent use.
type Server struct {
	core *amqptest.Server // its lock guards the entities too

	entities map[string]*entity // queues, subscriptions and their dead-letter queues, by lower-case path
	topics   map[string]*topic
}

// NewServer starts a server on 127.0.0.1 on a free port.
func NewServer() (*Server, error) {
	s := &Server{entities: map[string]*entity{}, topics: map[string]*topic{}}
	core, err := amqptest.NewServer("servicebustest", handler{s}, maxMessageSize)
	if err != nil {
		return nil, err
	}
	s.core = core
	return s, nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.core.Addr() }

// ConnectionString is a connection string for
// azservicebus.NewClientFromConnectionString. UseDevelopmentEmulator=true
// makes the client speak plain AMQP on the given port.
func (s *Server) ConnectionString() string {
	return "Endpoint=sb://" + s.Addr() + ";SharedAccessKeyName=test;SharedAccessKey=test;UseDevelopmentEmulator=true"
}

// Close closes every connection and the listener, and stops every lock
// timer.
func (s *Server) Close() error {
	err := s.core.Close()
	s.core.Lock()
	defer s.core.Unlock()
	for _, e := range s.entities {
		for _, m := range e.msgs {
			m.stopTimers()
		}
		for _, ss := range e.sessions {
			if ss.timer != nil {
				ss.timer.Stop()
			}
		}
	}
	return err
}

// DropConnections closes every client connection at once, as a network
// failure would; clients reconnect on their next operation. Locks held
// stay held until they expire.
func (s *Server) DropConnections() { s.core.DropConnections() }

// ErrExists is returned when an entity of that name exists already.
var ErrExists = errors.New("servicebustest: entity exists")

// CreateQueue creates a queue.
func (s *Server) CreateQueue(name string, opts QueueOptions) error {
	s.core.Lock()
	defer s.core.Unlock()
	key := strings.ToLower(name)
	if s.entities[key] != nil || s.topics[key] != nil {
		return fmt.Errorf("%w: %s", ErrExists, name)
	}
	e := s.newEntity(name, opts.withDefaults())
	if opts.RequiresDuplicateDetection {
		e.dedup = newDedup(e.opts.DuplicateDetectionWindow)
	}
	return nil
}

// CreateTopic creates a topic; give it subscriptions with
// CreateSubscription (a message sent to a topic without any is dropped).
func (s *Server) CreateTopic(name string, opts QueueOptions) error {
	s.core.Lock()
	defer s.core.Unlock()
	key := strings.ToLower(name)
	if s.entities[key] != nil || s.topics[key] != nil {
		return fmt.Errorf("%w: %s", ErrExists, name)
	}
	t := &topic{name: name}
	if opts.RequiresDuplicateDetection {
		t.dedup = newDedup(opts.withDefaults().DuplicateDetectionWindow)
	}
	s.topics[key] = t
	return nil
}

// CreateSubscription creates a subscription of topic, at the path
// "<topic>/Subscriptions/<name>".
func (s *Server) CreateSubscription(topicName, name string, opts QueueOptions) error {
	s.core.Lock()
	defer s.core.Unlock()
	t := s.topics[strings.ToLower(topicName)]
	if t == nil {
		return fmt.Errorf("servicebustest: no topic %s", topicName)
	}
	path := topicName + "/Subscriptions/" + name
	if s.entities[strings.ToLower(path)] != nil {
		return fmt.Errorf("%w: %s", ErrExists, path)
	}
	t.subs = append(t.subs, s.newEntity(path, opts.withDefaults()))
	return nil
}

func (s *Server) newEntity(path string, opts QueueOptions) *entity {
	e := &entity{s: s, path: path, opts: opts, locked: map[amqptest.UUID]*message{}}
	if opts.RequiresSession {
		e.sessions = map[string]*sbSession{}
	}
	e.dlq = &entity{s: s, path: path + "/$DeadLetterQueue", opts: opts, locked: map[amqptest.UUID]*message{}}
	// A dead-letter queue has no sessions, no limit and no expiry.
	e.dlq.opts.MaxDeliveryCount = 1 << 30
	e.dlq.opts.RequiresSession = false
	e.dlq.opts.DefaultMessageTimeToLive = 0
	s.entities[strings.ToLower(path)] = e
	s.entities[strings.ToLower(e.dlq.path)] = e.dlq
	return e
}

// Stats counts an entity's messages by state.
type Stats struct {
	Active       int // available to receivers
	Locked       int // delivered in PeekLock, not settled
	Deferred     int
	Scheduled    int // waiting for their ScheduledEnqueueTime
	DeadLettered int // in the entity's dead-letter queue
}

// Stats returns the counts of the queue or subscription at path.
func (s *Server) Stats(path string) (Stats, error) {
	s.core.Lock()
	defer s.core.Unlock()
	e := s.lookup(path)
	if e == nil {
		return Stats{}, fmt.Errorf("servicebustest: no entity %s", path)
	}
	var st Stats
	for _, m := range e.msgs {
		switch m.state {
		case stateAvailable:
			st.Active++
		case stateLocked:
			st.Locked++
		case stateDeferred:
			st.Deferred++
		case stateScheduled:
			st.Scheduled++
		}
	}
	if e.dlq != nil {
		st.DeadLettered = len(e.dlq.msgs)
	}
	return st, nil
}

func (s *Server) lookup(path string) *entity {
	return s.entities[strings.ToLower(strings.TrimPrefix(path, "/"))]
}

// lookupSend returns what a sender to path writes to: a queue or a topic.
func (s *Server) lookupSend(path string) any {
	key := strings.ToLower(strings.TrimPrefix(path, "/"))
	if t := s.topics[key]; t != nil {
		return t
	}
	if e := s.entities[key]; e != nil && e.dlq != nil && !strings.Contains(key, "/subscriptions/") {
		return e
	}
	return nil
}

type topic struct {
	name  string
	subs  []*entity
	dedup *dedup
}

type dedup struct {
	window time.Duration
	seen   map[string]time.Time
}

func newDedup(w time.Duration) *dedup { return &dedup{window: w, seen: map[string]time.Time{}} }

// duplicate reports whether id was sent within the window, and records it
// otherwise. The window runs from the first message with the id.
func (d *dedup) duplicate(id string, now time.Time) bool {
	if d == nil || id == "" {
		return false
	}
	if t, ok := d.seen[id]; ok && now.Sub(t) < d.window {
		return true
	}
	if len(d.seen) > 1024 && len(d.seen)%1024 == 0 {
		for k, t := range d.seen {
			if now.Sub(t) >= d.window {
				delete(d.seen, k)
			}
		}
	}
	d.seen[id] = now
	return false
}

// receive stores what a client sent to path: one message, or a batch.
// It returns the delivery state for the client.
func (s *Server) receive(path string, format uint32, body []byte) amqptest.Described {
	msgs, err := parseMessages(format, body)
	if err != nil {
		return amqptest.Perf(amqptest.CodeRejected, amqptest.Error("amqp:decode-error", err.Error(), nil))
	}
	now := time.Now()
	dst := s.lookupSend(path)
	if err := refuseSessionless(dst, msgs); err != nil {
		return amqptest.Perf(amqptest.CodeRejected, *err)
	}
	switch dst := dst.(type) {
	case *topic:
		for _, m := range msgs {
			if dst.dedup.duplicate(m.id, now) {
				continue
			}
			for _, sub := range dst.subs {
				sub.add(m.clone(), now)
			}
		}
	case *entity:
		for _, m := range msgs {
			if dst.dedup.duplicate(m.id, now) {
				continue
			}
			dst.add(m, now)
		}
	default:
		return amqptest.Perf(amqptest.CodeRejected, amqptest.Error("amqp:not-found", "no queue or topic "+path, nil))
	}
	return amqptest.Perf(amqptest.CodeAccepted)
}

// refuseSessionless is the error of a send of a message without a
// SessionID to a session-enabled queue (or a topic with a session-enabled
// subscription), which Service Bus refuses; nil when every message may go.
func refuseSessionless(dst any, msgs []*message) *amqptest.Described {
	var needs bool
	switch dst := dst.(type) {
	case *entity:
		needs = dst.opts.RequiresSession
	case *topic:
		for _, sub := range dst.subs {
			needs = needs || sub.opts.RequiresSession
		}
	}
	if !needs {
		return nil
	}
	for _, m := range msgs {
		if m.sessionID == "" {
			e := amqptest.Error("amqp:not-allowed", "The SessionId was not set on a message, and it cannot be sent to an entity which has session support enabled.", nil)
			return &e
		}
	}
	return nil
}

func newToken() amqptest.UUID {
	var u amqptest.UUID
	rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u
}

// tagOf is the delivery tag of a lock token: Service Bus sends the token's
// bytes in .NET GUID order (the first three fields little-endian), which
// the client turns back into RFC 4122 order.
func tagOf(t amqptest.UUID) []byte {
	b := t
	b[0], b[3] = b[3], b[0]
	b[1], b[2] = b[2], b[1]
	b[4], b[5] = b[5], b[4]
	b[6], b[7] = b[7], b[6]
	return b[:]
}
