package demo

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
	outboxsqlite "github.com/idemgo/idem/outbox/sqlite"
	"github.com/idemgo/idem/store/sqlite"
)

// Producers for Config.Producer.
const (
	// ProducerDirect publishes each order straight to the broker (the
	// default).
	ProducerDirect = "direct"
	// ProducerOutbox enqueues each order in a transactional outbox (SQLite,
	// in a temporary directory), one transaction per send, and a relay
	// publishes the outbox through the broker's outbox publisher.
	ProducerOutbox = "outbox"
)

// outboxTransport is a transport with an outbox publisher
// (outbox/servicebus on Service Bus).
type outboxTransport interface {
	// outboxPublisher returns a publisher to the destination the
	// consumers read, and that destination.
	outboxPublisher() (outbox.Publisher, string, error)
}

// outboxProducer is the outbox producer: a SQLite outbox the producer's
// transactions write, and its relay.
type outboxProducer struct {
	dir   string
	db    *sqlite.Store
	ob    *outboxsqlite.Store
	dest  string
	stop  context.CancelFunc
	done  chan struct{}
	label string
}

// startOutbox opens the outbox and starts its relay on b's outbox
// publisher. A relay that fails sends its error to fail.
func startOutbox(ctx context.Context, b transport, fail chan<- error) (_ *outboxProducer, err error) {
	ot, ok := b.(outboxTransport)
	if !ok {
		return nil, fmt.Errorf("%w: the outbox producer runs on --broker %s only (%s has no outbox publisher in the demo)", ErrConfig, ServiceBus.name, b.name())
	}
	pub, dest, err := ot.outboxPublisher()
	if err != nil {
		return nil, fmt.Errorf("%w: outbox publisher: %v", ErrBroker, err)
	}
	p := &outboxProducer{dest: dest, done: make(chan struct{}), label: "outbox (SQLite, relayed by outbox/servicebus)"}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if p.dir, err = os.MkdirTemp("", "idem-demo-outbox-"); err != nil {
		return nil, err
	}
	if p.db, err = sqlite.Open(filepath.Join(p.dir, "outbox.db"), sqlite.Options{}); err != nil {
		return nil, fmt.Errorf("outbox database: %w", err)
	}
	if p.ob, err = outboxsqlite.New(p.db.DB(), outboxsqlite.Options{}); err != nil {
		return nil, err
	}
	if err := p.ob.Migrate(ctx); err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	relay, err := outbox.NewRelay(p.ob, pub, outbox.RelayOptions{PollInterval: 20 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	rctx, stop := context.WithCancel(context.Background())
	p.stop = stop
	go func() {
		defer close(p.done)
		if err := relay.Run(rctx); err != nil && rctx.Err() == nil {
			select {
			case fail <- fmt.Errorf("%w: outbox relay: %v", ErrBroker, err):
			default:
			}
		}
	}()
	return p, nil
}

// outboxID is the outbox id of a send of m: the order id with a digest of
// the content, so that a producer retry (same order, same content) is the
// outbox's same message, kept once, and an order id reused with other
// content is another message, which the consumers' guard then catches as
// a conflict on the order key.
func outboxID(m message) string {
	fp, _ := idem.PayloadFingerprint(idem.Message{Payload: m.payload()})
	return idem.DedupID(m.Order.ID, fp)
}

// publish enqueues m in a transaction of its own, as a producer's business
// transaction would.
func (p *outboxProducer) publish(ctx context.Context, m message, seq uint64) error {
	err := p.db.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return p.ob.Enqueue(ctx, tx, outbox.Message{
			ID: outboxID(m), Destination: p.dest, Payload: m.payload(),
			Headers: map[string]string{"Content-Type": "application/json", orderHeader: m.Order.ID, seqHeader: strconv.FormatUint(seq, 10)},
		})
	})
	if err != nil {
		return fmt.Errorf("enqueue %s in the outbox: %w", m.Order.ID, err)
	}
	return nil
}

// close stops the relay and removes the outbox.
func (p *outboxProducer) close() {
	if p.stop != nil {
		p.stop()
		<-p.done
	}
	if p.db != nil {
		p.db.Close()
	}
	if p.dir != "" {
		os.RemoveAll(p.dir)
	}
}
