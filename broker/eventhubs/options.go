package eventhubs

import (
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// Options configure a Consumer. The zero value of every field is a
// sensible default but DeadLetter's, which is required. The scope and the
// key are the guard's (idem.Options.Scope, filled by NewGuard, and
// idem.Options.Key over MessageOf), never the consumer's.
type Options struct {
	// Concurrency is how many partitions are handled at once (each one
	// event at a time, in order). Default 1.
	Concurrency int
	// Backoff gives the delay before a failed event is tried again, from
	// its attempt, and the pace at which an event held in progress
	// elsewhere or during a store outage is claimed again. Its partition
	// waits meanwhile: Event Hubs has no per-event retry. Default
	// idem.ExponentialBackoff(DefaultMinBackoff, DefaultMaxBackoff).
	Backoff func(attempt int) time.Duration
	// MaxHold bounds how long an event whose key is in progress
	// elsewhere is held before its partition waits out the holder's
	// lease. Default DefaultMaxHold; negative: never held.
	MaxHold time.Duration
	// MaxDeliveries is how many times the handler may fail an event (the
	// record's attempts in two-phase mode, the tries in this process in
	// the inbox) before it is dead-lettered (ReasonMaxDeliver). Zero: no
	// limit, the partition waits on a failing event for ever.
	MaxDeliveries int
	// ShutdownTimeout bounds how long Run waits, once its context ends,
	// for in-flight handlers before cancelling their contexts. Default
	// 30s.
	ShutdownTimeout time.Duration
	// Hooks are the user's places in the flow of each event.
	Hooks broker.Hooks[*azeventhubs.ReceivedEventData]

	// DeadLetter sends to the dead-letter event hub (required): conflicts,
	// permanent errors and events over MaxDeliveries go there with
	// idem's properties and where they came from (see DeadLetter). Event
	// Hubs has no dead-letter queue of its own.
	DeadLetter *azeventhubs.ProducerClient
	// EventHub names the consumed hub in the dead letters'
	// Idem-Original-Event-Hub property.
	EventHub string
	// BatchSize is how many events one receive asks a partition for; the
	// checkpoint moves after each batch. Default 100.
	BatchSize int
	// ReceiveWait is how long a receive waits to fill its batch before it
	// hands on what it has. Default 1s.
	ReceiveWait time.Duration
}

// Default back-off bounds and hold (broker.Options).
const (
	DefaultMinBackoff = broker.DefaultMinBackoff
	DefaultMaxBackoff = broker.DefaultMaxBackoff
	DefaultMaxHold    = broker.DefaultMaxHold
)

// ReasonMaxDeliver is broker.ReasonMaxDeliver: the dead-letter reason of
// an event whose handler failed MaxDeliveries times.
const ReasonMaxDeliver = broker.ReasonMaxDeliver

// engine is the engine's share of o.
func (o Options) engine() broker.Options[*azeventhubs.ReceivedEventData] {
	return broker.Options[*azeventhubs.ReceivedEventData]{
		Concurrency: o.Concurrency, Backoff: o.Backoff, MaxHold: o.MaxHold, MaxDeliveries: o.MaxDeliveries,
		ShutdownTimeout: o.ShutdownTimeout, Hooks: o.Hooks,
	}
}

func (o *Options) fill() error {
	if o.DeadLetter == nil {
		return fmt.Errorf("%w: eventhubs: no DeadLetter producer (Event Hubs has no dead-letter queue of its own)", idem.ErrInvalidOptions)
	}
	if o.BatchSize < 0 || o.ReceiveWait < 0 || o.Concurrency < 0 {
		return fmt.Errorf("%w: eventhubs: negative BatchSize, ReceiveWait or Concurrency", idem.ErrInvalidOptions)
	}
	if o.BatchSize == 0 {
		o.BatchSize = 100
	}
	if o.ReceiveWait == 0 {
		o.ReceiveWait = time.Second
	}
	if o.Concurrency == 0 {
		o.Concurrency = 1
	}
	return nil
}
