// Package demo runs the idem demo: a producer publishes orders to a real
// broker, some of them twice (producer retries) and a few reusing an id with
// other content; competing consumers charge each order to an account ledger
// through idem while chaos crashes them between commit and ack, loses acks
// and fails handlers; a naive consumer without dedup reads the same stream
// under the same chaos. The report shows the naive consumer over-charging and
// idem charging every order exactly once, and checks it.
//
//	rep, err := demo.Run(ctx, demo.Config{Orders: 500, Consumers: 4, CrashRate: 0.1, Seed: 7})
//	if err != nil { ... }          // the demo could not run (broker, store)
//	rep.WriteTable(os.Stdout)
//	if !rep.InvariantOK { ... }    // rep.Offending lists the orders
package demo

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/idemgo/idem"
)

// Defaults for Config.
const (
	DefaultOrders       = 4000
	DefaultConsumers    = 4
	DefaultDupRate      = 0.2
	DefaultConflictRate = 0.005
	DefaultCrashRate    = 0.05
	DefaultAckWait      = time.Second
	DefaultStall        = 30 * time.Second
	DefaultDeadline     = 5 * time.Minute
)

// ErrStalled means the run stopped making progress before every message was
// settled.
var ErrStalled = errors.New("demo stalled")

// Config configures a run. The zero value runs the default scenario with
// random faults.
type Config struct {
	Orders       int     // distinct orders published; default DefaultOrders
	Consumers    int     // competing idem consumers (and naive ones); default DefaultConsumers
	DupRate      float64 // share of orders the producer sends again; default DefaultDupRate, negative: none
	ConflictRate float64 // share of order ids reused with other content (at least one); default DefaultConflictRate, negative: none
	CrashRate    float64 // per delivery: crash after commit (and half as often a lost ack, a failed handler); default DefaultCrashRate, negative: none
	Seed         uint64  // the faults and the orders; 0: random (reported)
	Store        string  // store DSN; "": an embedded store in a temporary directory
	On           *Broker // the broker (NATS, AMQP, ServiceBus, ...); nil: NATS
	Broker       string  // the URL of the user's server of On; "": one the demo runs in process
	// Producer is ProducerDirect ("" too: each order published to the
	// broker) or ProducerOutbox (each order enqueued in a transactional
	// outbox, published by its relay; on ServiceBus).
	Producer string
	Mode     string // "auto" (tx where the store has a transactional inbox), "tx", "two-phase"
	AckWait  time.Duration
	Stall    time.Duration // fail when nothing settles for this long; default 30s
	Deadline time.Duration // fail after this long overall; default 5m
	// Progress, when set, receives a live status line (rewritten with \r)
	// every 200ms.
	Progress io.Writer
	// Observer, when set, sees every message of idem's consumers (idem
	// demo --metrics-addr gives it idemprom's).
	Observer idem.Observer
}

func (c *Config) defaults() error {
	def := func(v *float64, d float64) {
		switch {
		case *v == 0:
			*v = d
		case *v < 0:
			*v = 0
		}
	}
	if c.Orders == 0 {
		c.Orders = DefaultOrders
	}
	if c.Consumers == 0 {
		c.Consumers = DefaultConsumers
	}
	def(&c.DupRate, DefaultDupRate)
	def(&c.ConflictRate, DefaultConflictRate)
	def(&c.CrashRate, DefaultCrashRate)
	if c.AckWait <= 0 {
		c.AckWait = DefaultAckWait
	}
	if c.Stall <= 0 {
		c.Stall = DefaultStall
	}
	if c.Deadline <= 0 {
		c.Deadline = DefaultDeadline
	}
	if c.Mode == "" {
		c.Mode = "auto"
	}
	switch {
	case c.Orders < 1 || c.Orders > 1_000_000:
		return fmt.Errorf("orders must be between 1 and 1000000, not %d", c.Orders)
	case c.Consumers < 1 || c.Consumers > 256:
		return fmt.Errorf("consumers must be between 1 and 256, not %d", c.Consumers)
	case c.DupRate > 1:
		return fmt.Errorf("dup rate must be between 0 and 1, not %g", c.DupRate)
	case c.ConflictRate > 0.5:
		return fmt.Errorf("conflict rate must be between 0 and 0.5, not %g", c.ConflictRate)
	case c.CrashRate > 0.45:
		return fmt.Errorf("crash rate must be between 0 and 0.45 (lost acks and failed handlers add half as much each), not %g", c.CrashRate)
	case c.Mode != "auto" && c.Mode != "tx" && c.Mode != "two-phase":
		return fmt.Errorf("mode must be auto, tx or two-phase, not %q", c.Mode)
	case c.Producer != "" && c.Producer != ProducerDirect && c.Producer != ProducerOutbox:
		return fmt.Errorf("producer must be %s or %s, not %q", ProducerDirect, ProducerOutbox, c.Producer)
	case c.Broker == "" && c.On != nil && !c.On.inProcess:
		return fmt.Errorf("the demo runs %s on your server only: give its URL", c.On.name)
	case c.Broker != "" && c.On != nil && !c.On.url:
		return fmt.Errorf("the demo runs %s in process only (--broker %s), not on a server of yours", c.On.name, c.On.name)
	case c.Producer == ProducerOutbox && c.On != ServiceBus:
		return fmt.Errorf("the outbox producer runs on --broker %s only (the demo has no outbox publisher for %s yet)", ServiceBus.name, c.brokerName())
	}
	return nil
}

// brokerName names the broker of c, for messages.
func (c *Config) brokerName() string {
	if c.On == nil {
		return NATS.name
	}
	return c.On.name
}

// ErrConfig means the Config is invalid; the message says which field.
var ErrConfig = errors.New("invalid demo configuration")

// Report is the outcome of a run.
type Report struct {
	Store     string `json:"store"`
	Broker    string `json:"broker"`
	Producer  string `json:"producer"` // "direct", or the outbox the orders went through
	Mode      string `json:"mode"`     // tx or two-phase
	Consumers int    `json:"consumers"`
	Seed      uint64 `json:"seed"`
	RunID     string `json:"run_id"` // names the run's stream, scope and tables
	Scope     string `json:"scope"`  // the scope of the run's records

	// On a store the user named: what the run wrote there and removed.
	StoreNamed     bool     `json:"store_named"`           // the store is the user's (--store), not an embedded one
	Where          string   `json:"store_where,omitempty"` // its table or key prefix
	SchemaCreated  bool     `json:"schema_created"`        // the run created idem's schema there (as idem migrate does) and left it
	RecordsRemoved int64    `json:"records_removed"`       // the run's records it deleted afterwards
	LeftBehind     []string `json:"left_behind,omitempty"` // what it could not remove, and how to

	Published            int      `json:"published"`             // messages the producer published
	Unique               int      `json:"unique"`                // distinct orders among them
	Retries              int      `json:"producer_retries"`      // re-sent copies
	BrokerDropped        int      `json:"broker_dropped"`        // re-sent copies the broker's duplicate detection dropped before any consumer (Service Bus)
	OutboxKeptOnce       int      `json:"outbox_kept_once"`      // re-sent copies the outbox kept once (the outbox producer): never published
	ConflictingSent      int      `json:"conflicting_sent"`      // messages reusing an id with other content
	Deliveries           int64    `json:"deliveries"`            // deliveries to idem's consumers, redeliveries included
	DuplicatesSuppressed int64    `json:"duplicates_suppressed"` // deliveries idem recognised and skipped
	InProgressRetried    int64    `json:"in_progress_retried"`   // deliveries deferred while another consumer held the key
	Conflicts            int      `json:"conflicts"`             // order ids caught reused with other content (at most ConflictingSent)
	ConflictDeadLetters  int      `json:"conflict_dead_letters"` // messages dead-lettered as conflicts: each losing version, with its producer retries
	EffectsApplied       int      `json:"effects_applied"`       // charges idem's consumers applied
	NaiveDeliveries      int64    `json:"naive_deliveries"`      // deliveries to the naive consumers
	NaiveEffectsApplied  int      `json:"naive_effects_applied"` // charges the naive consumers applied
	NaiveOvercharged     int      `json:"naive_overcharged"`     // orders the naive consumers charged more than once
	NaiveBalanceError    int64    `json:"naive_balance_error"`   // cents the naive ledger is off by
	Crashes              int64    `json:"crashes"`               // injected crashes after commit, before ack (idem side)
	AcksLost             int64    `json:"acks_lost"`             // injected lost acks (idem side)
	HandlerFailures      int64    `json:"handler_failures"`      // injected transient handler failures (idem side)
	Restarts             int64    `json:"restarts"`              // consumer restarts after crashes (both sides)
	ElapsedMS            int64    `json:"elapsed_ms"`            //
	InvariantOK          bool     `json:"invariant_ok"`          // every order charged exactly once, balances right, conflicts dead-lettered
	Offending            []string `json:"offending,omitempty"`   // what broke the invariant, one line per order or account
}
