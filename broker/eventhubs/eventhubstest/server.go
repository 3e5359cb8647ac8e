// Package eventhubstest is an in-process Azure Event Hubs for tests: a
// small server on a loopback port that speaks enough AMQP 1.0,
// claims-based security ($cbs) and the Event Hubs management protocol
// ($management) for the real, unmodified azeventhubs (v2) client to send
// and receive against it, as kfake is for Kafka. Microsoft's emulator is
// a container; this needs nothing but the test process. It shares its
// AMQP core with servicebustest.
//
//	srv, err := eventhubstest.NewServer()
//	defer srv.Close()
//	srv.CreateHub("orders", eventhubstest.HubOptions{Partitions: 2})
//	producer, err := azeventhubs.NewProducerClientFromConnectionString(srv.ConnectionString(), "orders", nil)
//
// Production code runs against Azure unchanged: only the connection string
// differs (it carries UseDevelopmentEmulator=true, which turns TLS off).
//
// # Fidelity
//
// Each documented Event Hubs behaviour it models, and the test (through
// the real azeventhubs client) that holds it to it:
//
//	Behaviour                                                        Test
//	hub properties (name, created, partition ids) and partition      TestProperties
//	  properties (begin and last sequence number, last offset and
//	  enqueued time, empty) on $management
//	send to a partition; receive in order with sequence number       TestSendReceivePartition
//	  (from 0), offset (a byte position, as a string), enqueued
//	  time, properties and message id as sent
//	start positions: earliest, latest, offset, sequence number,      TestStartPositions
//	  enqueued time, each inclusive or not
//	send to the hub: a batch goes to one partition, round robin;     TestPartitionKey
//	  by partition key: one key, one partition, always
//	batches as one send; a batch or event over the link's maximum    TestBatchSizeLimit
//	  message size (MaxMessageSize) refused by the client, a single
//	  oversized message refused by the server
//	consumer groups: each reads the whole partition on its own;      TestConsumerGroups
//	  an unknown one is refused (amqp:not-found)
//	owner level: a receiver with an owner level equal or higher      TestOwnerLevel
//	  takes the partition in its consumer group; the one it took it
//	  from fails with amqp:link:stolen (the SDK's
//	  ErrorCodeOwnershipLost); a lower one, or one without an owner
//	  level while an owner holds it, is detached at once with the same
//	  error
//	retention, per hub (HubOptions.Retention): an event older than   TestRetention
//	  it is gone from reads, from the earliest position and from a
//	  sequence number before it, the partition's begin sequence
//	  number moves past it (empty when every event expired, the last
//	  enqueued one still reported); a hub without it keeps all
//	operations it does not model: refused at once                   TestUnmodelledRefusedAtOnce
//
// # What it refuses
//
// What it does not model is refused at once with an error naming it: a
// management operation other than reading hub and partition properties
// (status 404, amqp:not-implemented), a receive filter other than the
// start positions above (amqp:not-implemented), an unknown hub, consumer
// group or partition (amqp:not-found). Retention is any duration, not
// Event Hubs' whole hours, and removes events one by one as they age, not
// by storage segment as Event Hubs does (which may keep an event somewhat
// longer). Not modelled at all: the real partition-key hash (a key's
// partition is stable but not Azure's), the limit of five readers per
// partition and consumer group, receiver runtime metrics
// (TrackLastEnqueuedEventProperties), idempotent publishing,
// geo-replication, quotas and throttling, TLS and WebSockets, and the
// administration API: hubs are made with CreateHub. Any SASL mechanism
// and any token are accepted. State lives in memory only.
package eventhubstest

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/idemgo/idem/internal/amqptest"
)

// Defaults of a new hub, and of the server.
const (
	DefaultPartitions     = 4
	DefaultConsumerGroup  = "$Default"
	DefaultMaxMessageSize = 1 << 20 // Event Hubs Standard's limit of an event or batch
)

// HubOptions configure an event hub. The zero value takes the defaults.
type HubOptions struct {
	Partitions     int      // default DefaultPartitions; ids "0", "1", ...
	ConsumerGroups []string // besides $Default
	// Retention is how long the hub keeps an event after it was
	// enqueued: an older one is gone from reads and from the earliest
	// position, and the partition's BeginningSequenceNumber moves past
	// it. Zero keeps events until Close. Event Hubs counts it in hours
	// (at least one); any duration is taken here, and Options.Now can
	// move the clock instead of the test waiting.
	Retention time.Duration
}

// Options configure a server.
type Options struct {
	// MaxMessageSize is the largest event or batch a sender may send, in
	// bytes: the links announce it (the client sizes its batches by it)
	// and the server refuses a larger message. Default
	// DefaultMaxMessageSize.
	MaxMessageSize uint64
	// Now is the server's clock: events' enqueued times, and retention.
	// Default time.Now.
	Now func() time.Time
}

// Server is an in-process Event Hubs namespace listening on a loopback
// port. Its methods are safe for concurrent use.
type Server struct {
	core    *amqptest.Server // its lock guards the hubs too
	maxSize uint64
	clock   func() time.Time
	hubs    map[string]*hub // by lower-case name
}

// NewServer starts a server on 127.0.0.1 on a free port. opts is
// optional.
func NewServer(opts ...Options) (*Server, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.MaxMessageSize == 0 {
		o.MaxMessageSize = DefaultMaxMessageSize
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Server{maxSize: o.MaxMessageSize, clock: o.Now, hubs: map[string]*hub{}}
	core, err := amqptest.NewServer("eventhubstest", handler{s}, o.MaxMessageSize)
	if err != nil {
		return nil, err
	}
	s.core = core
	return s, nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.core.Addr() }

// ConnectionString is a namespace connection string for
// azeventhubs.NewProducerClientFromConnectionString and
// NewConsumerClientFromConnectionString (the hub is their argument).
// UseDevelopmentEmulator=true makes the client speak plain AMQP on the
// given port.
func (s *Server) ConnectionString() string {
	return "Endpoint=sb://" + s.Addr() + ";SharedAccessKeyName=test;SharedAccessKey=test;UseDevelopmentEmulator=true"
}

// Close closes every connection and the listener.
func (s *Server) Close() error { return s.core.Close() }

// DropConnections closes every client connection at once, as a network
// failure would; clients reconnect on their next operation.
func (s *Server) DropConnections() { s.core.DropConnections() }

// ErrExists is returned when a hub or consumer group of that name exists
// already.
var ErrExists = errors.New("eventhubstest: exists")

// CreateHub creates an event hub with its partitions and consumer groups.
func (s *Server) CreateHub(name string, opts HubOptions) error {
	if opts.Partitions <= 0 {
		opts.Partitions = DefaultPartitions
	}
	s.core.Lock()
	defer s.core.Unlock()
	key := strings.ToLower(name)
	if s.hubs[key] != nil {
		return fmt.Errorf("%w: hub %s", ErrExists, name)
	}
	h := &hub{name: name, created: s.clock().UTC(), clock: s.clock, retention: opts.Retention,
		groups: map[string]bool{strings.ToLower(DefaultConsumerGroup): true}}
	for i := range opts.Partitions {
		h.partitions = append(h.partitions, &partition{h: h, id: strconv.Itoa(i)})
	}
	for _, g := range opts.ConsumerGroups {
		h.groups[strings.ToLower(g)] = true
	}
	s.hubs[key] = h
	return nil
}

// CreateConsumerGroup adds a consumer group to a hub.
func (s *Server) CreateConsumerGroup(hubName, group string) error {
	s.core.Lock()
	defer s.core.Unlock()
	h := s.hubs[strings.ToLower(hubName)]
	if h == nil {
		return fmt.Errorf("eventhubstest: no hub %s", hubName)
	}
	if h.groups[strings.ToLower(group)] {
		return fmt.Errorf("%w: consumer group %s", ErrExists, group)
	}
	h.groups[strings.ToLower(group)] = true
	return nil
}

// Count returns how many events a partition of a hub holds: those its
// retention keeps.
func (s *Server) Count(hubName, partitionID string) (int, error) {
	s.core.Lock()
	defer s.core.Unlock()
	h := s.hubs[strings.ToLower(hubName)]
	if h == nil {
		return 0, fmt.Errorf("eventhubstest: no hub %s", hubName)
	}
	p := h.partition(partitionID)
	if p == nil {
		return 0, fmt.Errorf("eventhubstest: no partition %s of %s", partitionID, hubName)
	}
	p.expire(h.now())
	return len(p.events), nil
}

type hub struct {
	name       string
	created    time.Time
	clock      func() time.Time
	retention  time.Duration // 0: kept until Close
	partitions []*partition
	groups     map[string]bool // lower-case names
	next       int             // round robin of sends to the hub
}

func (h *hub) now() time.Time { return h.clock().UTC() }

func (h *hub) partition(id string) *partition {
	for _, p := range h.partitions {
		if p.id == id {
			return p
		}
	}
	return nil
}

// partitionFor is the partition of a send to the hub: by the partition
// key when there is one (always the same for a key), else round robin.
func (h *hub) partitionFor(key string, hasKey bool) *partition {
	if hasKey {
		f := fnv.New32a()
		f.Write([]byte(key))
		return h.partitions[int(f.Sum32()%uint32(len(h.partitions)))]
	}
	p := h.partitions[h.next%len(h.partitions)]
	h.next++
	return p
}
