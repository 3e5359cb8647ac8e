package mqttidem

import (
	"context"
	"fmt"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/idemgo/idem/broker"
)

// Replay publishes dl, a dead letter received from a DeadLetterTopic, back
// to the topic it came from (its PropertyTopic user property) at QoS 1,
// with its payload, content type and user properties but none of idem's
// dead-letter headers, and returns once the broker has acknowledged it
// (PUBACK). The consumer then decides as for any redelivery: a message
// never processed is applied once, one whose key was completed meanwhile
// is a duplicate, content that conflicts with the record is dead-lettered
// again. MQTT cannot delete a message: the dead letter is gone from the
// broker once the subscriber that received it acked it, so keep it until
// Replay returns. A message without PropertyTopic is refused with an error
// wrapping ErrNotDeadLetter.
func Replay(ctx context.Context, cm *autopaho.ConnectionManager, dl *paho.Publish) error {
	var topic string
	props := &paho.PublishProperties{}
	if p := dl.Properties; p != nil {
		props.ContentType = p.ContentType
		for _, u := range p.User {
			switch {
			case u.Key == PropertyTopic:
				topic = u.Value
			case u.Key == PropertyClientID, broker.IsDeadLetterHeader(u.Key):
			default:
				props.User.Add(u.Key, u.Value)
			}
		}
	}
	if topic == "" {
		return fmt.Errorf("mqtt: replay of a message on %s: %w", dl.Topic, ErrNotDeadLetter)
	}
	if _, err := cm.Publish(ctx, &paho.Publish{QoS: 1, Topic: topic, Payload: dl.Payload, Properties: props}); err != nil {
		return fmt.Errorf("mqtt: replay to %s: %w", topic, err)
	}
	return nil
}
