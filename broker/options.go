package broker

import (
	"fmt"
	"time"

	"github.com/idemgo/idem"
)

// Options are the engine's settings, the same vocabulary in every adapter:
// each adapter's Options declares these fields, flat, with these names and
// types (a literal reads natsidem.Options{Concurrency: 8, ...}; Watermill's
// middleware leaves Concurrency and ShutdownTimeout to its router), and
// builds its engine's Options from them. The zero value of each field is a
// sensible default.
type Options[M any] struct {
	// Concurrency is how many deliveries are handled at once. Default 1.
	Concurrency int
	// Backoff gives the delay before a retried delivery comes back, from
	// its attempt (1 for the first delivery), and the pace at which a
	// delivery held in progress elsewhere, or held while the store cannot
	// be reached, is claimed again (from its round). Default
	// idem.ExponentialBackoff(DefaultMinBackoff, DefaultMaxBackoff).
	Backoff func(attempt int) time.Duration
	// MaxHold bounds how long a delivery whose key is in progress
	// elsewhere is held (kept alive, spending none of the broker's
	// deliveries, claimed again on the back-off and at the latest when the
	// holder's lease ends) before it is handed back with the delay until
	// that lease ends. The broker's last allowed delivery is held without
	// bound. Default DefaultMaxHold; negative: never held.
	MaxHold time.Duration
	// MaxDeliveries is how many times the handler may fail a message
	// before it is dead-lettered (ReasonMaxDeliver). Failures are counted
	// where they are durable: the record's attempts in two-phase mode (a
	// store outage, a crash before the claim or a held delivery is not a
	// failure), the broker's delivery count in the transactional inbox
	// (whose marker rolls back with the failure). Set it to the broker's
	// own delivery limit where the broker has one, and the adapter tells
	// the engine which delivery is the last. Zero: no limit of idem's.
	MaxDeliveries int
	// ShutdownTimeout bounds how long Run waits, once its context ends,
	// for in-flight handlers before cancelling their contexts (it still
	// waits for them to return). Default 30s.
	ShutdownTimeout time.Duration
	// Hooks are the user's places in the flow of each delivery.
	Hooks Hooks[M]
}

// Defaults of Options.
const (
	DefaultMinBackoff      = 500 * time.Millisecond
	DefaultMaxBackoff      = 30 * time.Second
	DefaultMaxHold         = 5 * time.Minute
	DefaultShutdownTimeout = 30 * time.Second
)

// Fill checks o and sets the defaults of its zero fields. NewEngine
// calls it; adapters call it where they need the filled values earlier
// (a prefetch sized from Concurrency). Errors wrap idem.ErrInvalidOptions.
func (o *Options[M]) Fill() error {
	if o.Concurrency < 0 || o.MaxDeliveries < 0 || o.ShutdownTimeout < 0 {
		return fmt.Errorf("%w: broker: negative Concurrency, MaxDeliveries or ShutdownTimeout", idem.ErrInvalidOptions)
	}
	if o.Concurrency == 0 {
		o.Concurrency = 1
	}
	if o.Backoff == nil {
		o.Backoff = idem.ExponentialBackoff(DefaultMinBackoff, DefaultMaxBackoff)
	}
	if o.MaxHold == 0 {
		o.MaxHold = DefaultMaxHold
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	return nil
}
