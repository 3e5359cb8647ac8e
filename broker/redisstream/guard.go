package redisstream

import (
	"fmt"

	"github.com/idemgo/idem"
)

// NewGuard returns a guard over store for a consumer group of a stream.
// The guard is the one place for the scope and the key: an empty
// opts.Scope becomes "<stream>/<group>", the consumer's identity (every
// consumer of the group shares the entries; two groups of one stream each
// get every entry, and never block each other); a set one is kept.
// opts.Key is kept too: its default, idem.MessageID, reads the Idem-Id
// field, which MessageOf puts in idem.Message.ID. Without a scope, an
// empty stream or group is an error wrapping idem.ErrInvalidOptions.
func NewGuard(store idem.Store, stream, group string, opts idem.Options) (*idem.Guard, error) {
	if opts.Scope == "" {
		if stream == "" || group == "" {
			return nil, fmt.Errorf("%w: redisstream: no stream and group to name the scope by; give them or set idem.Options.Scope", idem.ErrInvalidOptions)
		}
		opts.Scope = stream + "/" + group
	}
	return idem.New(store, opts)
}
