package mqttidem

import (
	"fmt"
	"strings"

	"github.com/idemgo/idem"
)

// NewGuard returns a guard over store for a consumer of topic (the topic
// filter of Options.Topic) on the session clientID (Options.ClientID).
// The guard is the one place for the scope and the key: an empty
// opts.Scope becomes the consumer's identity, the one that receives its
// own copy of each message: for a shared subscription
// ("$share/group/filter") the subscription itself, which every process of
// the group shares; for any other, the session, clientID, which gets every
// message of its filter. Two groups of one filter, or two sessions, then
// never block each other; a set scope is kept. opts.Key is kept too: its
// default, idem.MessageID, reads the idem-id user property, which
// MessageOf puts in idem.Message.ID. Without a scope, an empty topic, or
// an empty clientID for a subscription that is not shared, is an error
// wrapping idem.ErrInvalidOptions.
func NewGuard(store idem.Store, topic, clientID string, opts idem.Options) (*idem.Guard, error) {
	if opts.Scope == "" {
		switch {
		case topic == "":
			return nil, fmt.Errorf("%w: mqtt: no topic filter to name the scope by; give it or set idem.Options.Scope", idem.ErrInvalidOptions)
		case strings.HasPrefix(topic, "$share/"):
			opts.Scope = topic
		case clientID == "":
			return nil, fmt.Errorf("%w: mqtt: no client id to name the scope of the unshared subscription %q by; give it or set idem.Options.Scope", idem.ErrInvalidOptions, topic)
		default:
			opts.Scope = clientID
		}
	}
	return idem.New(store, opts)
}
