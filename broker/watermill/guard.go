package watermillidem

import (
	"fmt"

	"github.com/idemgo/idem"
)

// NewGuard returns a guard over store for the router handler named
// handler. The guard is the one place for the scope and the key: an empty
// opts.Scope becomes the handler's name, the consumer's identity (two
// handlers of one topic each get every message, and must not block each
// other: see ErrSharedScope); a set one is kept. opts.Key is kept too: its
// default, idem.MessageID, reads the Idem-Id metadata field, else the
// UUID, which MessageOf puts in idem.Message.ID. Without a scope, an empty
// handler name is an error wrapping idem.ErrInvalidOptions.
func NewGuard(store idem.Store, handler string, opts idem.Options) (*idem.Guard, error) {
	if opts.Scope == "" {
		if handler == "" {
			return nil, fmt.Errorf("%w: watermillidem: no handler name to name the scope by; give it or set idem.Options.Scope", idem.ErrInvalidOptions)
		}
		opts.Scope = handler
	}
	return idem.New(store, opts)
}
