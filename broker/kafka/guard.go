package kafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
)

// NewGuard returns a guard over store for a consumer on cl. The guard is
// the one place for the scope and the key: an empty opts.Scope becomes cl's
// consumer group, the consumer's identity, so two groups reading one topic
// never block each other; a set one is kept. opts.Key is kept too: its
// default, idem.MessageID, reads the idempotency-key header, which
// MessageOf puts in idem.Message.ID. Without a scope, a client without a
// consumer group is an error wrapping ErrClientConfig.
func NewGuard(store idem.Store, cl *kgo.Client, opts idem.Options) (*idem.Guard, error) {
	if opts.Scope == "" {
		if cl == nil {
			return nil, fmt.Errorf("%w: kafka: nil client", idem.ErrInvalidOptions)
		}
		group, _ := cl.OptValue(kgo.ConsumerGroup).(string)
		if group == "" {
			return nil, fmt.Errorf("%w: no consumer group (kgo.ConsumerGroup) to scope keys by", ErrClientConfig)
		}
		opts.Scope = group
	}
	return idem.New(store, opts)
}
