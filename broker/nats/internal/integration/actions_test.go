package integration_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/store/memory"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// recMsg is a jetstream.Msg that records the action taken on it.
type recMsg struct {
	jetstream.Msg
	id, subject string
	data        []byte
	delivered   uint64

	mu      sync.Mutex
	actions []string
}

func (m *recMsg) Headers() nats.Header {
	if m.id == "" {
		return nats.Header{}
	}
	return nats.Header{jetstream.MsgIDHeader: {m.id}}
}
func (m *recMsg) Data() []byte    { return m.data }
func (m *recMsg) Subject() string { return m.subject }
func (m *recMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{NumDelivered: m.delivered, Stream: "S",
		Sequence: jetstream.SequencePair{Stream: 7}}, nil
}
func (m *recMsg) record(a string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.actions = append(m.actions, a)
	return nil
}
func (m *recMsg) Ack() error                         { return m.record("ack") }
func (m *recMsg) DoubleAck(context.Context) error    { return m.record("double-ack") }
func (m *recMsg) NakWithDelay(d time.Duration) error { return m.record(fmt.Sprint("nak ", d)) }
func (m *recMsg) Term() error                        { return m.record("term") }
func (m *recMsg) InProgress() error                  { return nil }
func (m *recMsg) got() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return fmt.Sprint(m.actions)
}

// recJS records dead letters, or fails them.
type recJS struct {
	jetstream.JetStream
	fail bool
	mu   sync.Mutex
	dls  []*nats.Msg
}

func (js *recJS) PublishMsg(ctx context.Context, m *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if js.fail {
		return nil, errors.New("no responders")
	}
	js.mu.Lock()
	defer js.mu.Unlock()
	js.dls = append(js.dls, m)
	return &jetstream.PubAck{}, nil
}

type infoConsumer struct {
	jetstream.Consumer
	info *jetstream.ConsumerInfo
}

func (c infoConsumer) CachedInfo() *jetstream.ConsumerInfo { return c.info }

// failingStore is a store that is down.
type failingStore struct {
	*memory.Store
	claims *atomic.Int32
}

func (s failingStore) Claim(context.Context, idem.ClaimRequest) (idem.Claim, error) {
	s.claims.Add(1)
	return idem.Claim{}, errors.New("connection refused")
}

// TestActions checks the JetStream action taken for each outcome, without
// a server.
func TestActions(t *testing.T) {
	cons := infoConsumer{info: &jetstream.ConsumerInfo{Stream: "S", Name: "c",
		Config: jetstream.ConsumerConfig{MaxDeliver: 5}}}
	backoff := func(attempt int) time.Duration { return time.Duration(attempt) * time.Second }
	ok := natsidem.Handle(func(context.Context, jetstream.Msg) ([]byte, error) { return []byte("done"), nil })
	transient := natsidem.Handle(func(context.Context, jetstream.Msg) ([]byte, error) { return nil, errors.New("timeout") })
	permanent := natsidem.Handle(func(context.Context, jetstream.Msg) ([]byte, error) {
		return nil, idem.Permanent(errors.New("bad order"))
	})
	type step struct {
		h          natsidem.Handler
		msg        *recMsg
		wantAction string
		wantDLQ    string // reason of a dead letter published
	}
	down := failingStore{memory.New(), new(atomic.Int32)}
	tests := []struct {
		name    string
		store   idem.Store
		failDLQ bool
		steps   []step
	}{
		{"processed then duplicate acked", nil, false, []step{
			{ok, &recMsg{id: "a", data: []byte("1"), delivered: 1}, "[ack]", ""},
			{ok, &recMsg{id: "a", data: []byte("1"), delivered: 1}, "[ack]", ""},
		}},
		{"transient error naks with the attempt's back-off", nil, false, []step{
			{transient, &recMsg{id: "a", data: []byte("1"), delivered: 2}, "[nak 2s]", ""},
		}},
		{"last allowed delivery dead-letters", nil, false, []step{
			{transient, &recMsg{id: "a", data: []byte("1"), delivered: 5}, "[term]", "max_deliver"},
		}},
		{"conflict dead-letters", nil, false, []step{
			{ok, &recMsg{id: "a", data: []byte("1"), delivered: 1}, "[ack]", ""},
			{ok, &recMsg{id: "a", data: []byte("2"), delivered: 1}, "[term]", "conflict"},
		}},
		{"permanent error dead-letters", nil, false, []step{
			{permanent, &recMsg{id: "a", data: []byte("1"), delivered: 1}, "[term]", "permanent"},
		}},
		{"missing key dead-letters", nil, false, []step{
			{ok, &recMsg{data: []byte("1"), delivered: 1}, "[term]", "no_key"},
		}},
		{"failed dead letter naks instead of terminating", nil, true, []step{
			{permanent, &recMsg{id: "a", data: []byte("1"), delivered: 3}, "[nak 3s]", ""},
		}},
		// A store outage spends no delivery: the message is held (claimed
		// again on the back-off) and nak'ed only when Process's context ends.
		{"store down holds, naks when the context ends", down, false, []step{
			{ok, &recMsg{id: "a", data: []byte("1"), delivered: 1}, "[nak 1s]", ""},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := tt.store
			if store == nil {
				store = memory.New()
			}
			g, err := natsidem.NewGuard(store, cons, idem.Options{})
			if err != nil {
				t.Fatal(err)
			}
			js := &recJS{fail: tt.failDLQ}
			for i, s := range tt.steps {
				c, err := natsidem.NewConsumer(cons, g, s.h, natsidem.Options{Backoff: backoff, JetStream: js, DeadLetterSubject: "dlq"})
				if err != nil {
					t.Fatal(err)
				}
				s.msg.subject = "orders.x"
				ctx := context.Background()
				if tt.store == down {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, 1500*time.Millisecond)
					defer cancel()
				}
				r := c.Process(ctx, s.msg)
				if got := s.msg.got(); got != s.wantAction {
					t.Fatalf("step %d: actions %s, want %s (report %+v)", i, got, s.wantAction, r)
				}
				if s.wantDLQ != "" {
					js.mu.Lock()
					dl := js.dls[len(js.dls)-1]
					js.mu.Unlock()
					if dl.Header.Get(natsidem.HeaderReason) != s.wantDLQ || r.Reason != s.wantDLQ ||
						dl.Header.Get(natsidem.HeaderSubject) != "orders.x" || dl.Header.Get(natsidem.HeaderStreamSeq) != "7" ||
						dl.Header.Get(jetstream.MsgIDHeader) != "idem-dlq:S/c:7" || dl.Header.Get(natsidem.HeaderConsumer) != "S/c" {
						t.Fatalf("step %d: dead letter headers %v, report reason %q; want reason %q", i, dl.Header, r.Reason, s.wantDLQ)
					}
				}
			}
			if tt.store == down && down.claims.Load() < 2 {
				t.Fatalf("the store was claimed %d times while down: the message was not held", down.claims.Load())
			}
		})
	}
}
