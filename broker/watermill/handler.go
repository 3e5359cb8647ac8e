package watermillidem

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Handle is h run by m in two-phase mode (idem.Guard.Do): the router
// handler to register, as m.Middleware(h) is. The key is claimed with a
// lease, h runs and what it produced is published, and the record is
// completed; a duplicate is acked without running h. h's message context
// carries the key (idem.KeyFromContext, idem.DeriveKey for downstream
// calls and the UUIDs of produced messages) and is cancelled if another
// owner takes the key over. Wrap an error with idem.Permanent to
// dead-letter the message instead of retrying it.
//
// Watermill's router is the consumer here: it subscribes, schedules the
// handler calls and acks or nacks from what the handler returns, so this
// package has no NewConsumer or Consume of its own (New builds the
// middleware; router.Run runs it).
func Handle(m *Middleware, h message.HandlerFunc) message.HandlerFunc {
	return m.Middleware(h)
}

// HandleTx is a router handler that runs fn under m inside a transaction
// of the guard's store together with the dedup marker (idem.DoTx, the
// transactional inbox): fn's writes through tx and the marker commit
// together, or neither does; what fn produces is published before the
// commit. The guard's store must implement idem.TxStore[Tx]; one that
// does not, and a nil fn, are refused with an error wrapping
// idem.ErrInvalidOptions. It is HandlerTx under the name every idem
// broker adapter gives it.
func HandleTx[Tx any](m *Middleware, fn func(ctx context.Context, tx Tx, msg *message.Message) ([]*message.Message, error)) (message.HandlerFunc, error) {
	return HandlerTx(m, fn)
}
