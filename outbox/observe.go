package outbox

import (
	"context"
	"log/slog"

	"github.com/idemgo/idem"
)

// The relay reports to an idem.Observer (RelayOptions.Observer): its
// events to an idem.RelayObserver (ObserveRelay), its store and listener
// failures to an idem.ErrorObserver (ObserveError, Component "outbox").
// The guards' observer is the one to give it: idemotel, idemprom's
// Exporter.Observer(), the console's Recorder and idem.NewSlogObserver
// implement both.

// Event is one thing the relay did: idem.RelayEvent.
type Event = idem.RelayEvent

// EventKind says what an Event reports: idem.RelayEventKind.
type EventKind = idem.RelayEventKind

// Event kinds, as idem names them.
const (
	EventBatch         = idem.RelayBatch
	EventFailed        = idem.RelayFailed
	EventParked        = idem.RelayParked
	EventLeaseAcquired = idem.RelayLeaseAcquired
	EventLeaseLost     = idem.RelayLeaseLost
	EventCleanup       = idem.RelayCleanup
	EventLeaseReleased = idem.RelayLeaseReleased
	// EventError is no longer reported.
	//
	// Deprecated: the relay reports its store and listener failures to an
	// idem.ErrorObserver (HandledError.Component "outbox").
	EventError EventKind = 7
)

// ObserverFunc is a function that receives the relay's events, used as
// the relay's observer: an idem.RelayObserver that ignores the guard's
// events.
type ObserverFunc func(ctx context.Context, e Event)

// Observe ignores the guard's events.
func (f ObserverFunc) Observe(context.Context, idem.Event) {}

// ObserveRelay calls f.
func (f ObserverFunc) ObserveRelay(ctx context.Context, e Event) { f(ctx, e) }

// NewSlogObserver logs the relay's events (and every other fact) as
// idem.NewSlogObserver does.
//
// Deprecated: use idem.NewSlogObserver.
func NewSlogObserver(l *slog.Logger) idem.Observer { return idem.NewSlogObserver(l) }
