package kafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
)

// NewGuard returns a guard over store whose scope, when opts.Scope is empty,
// is cl's consumer group: the consumer's identity, so two groups reading one
// topic never block each other. It mirrors natsidem.NewGuard and
// amqpidem.NewGuard; NewConsumer applies Options.Scope and Options.Key on top.
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
