package mqttidem

import (
	"context"
	"fmt"
	"strings"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/idemgo/idem"
)

// Publish publishes p through cm with the stable message id id in its
// idem-id user property (PropertyID, replacing any), which MessageOf
// reads as the key, at QoS 1 at least (a consumer takes QoS 1 deliveries
// only: a QoS 0 message could be lost, and is not acked), and returns once
// the broker acknowledged it (PUBACK, or PUBCOMP at QoS 2). p itself is
// not changed. Reuse the same id when retrying a publish: the retry is
// another message to the broker, and the consumer's guard recognises it.
//
// Publish sets no broker dedup id, because MQTT has none: the broker
// compares no messages (QoS 2's exactly-once covers one hop, not a
// producer's retry), so nothing can swallow an id reused with other
// content; it reaches the consumer, whose guard dead-letters it as a
// conflict. An empty id is an error wrapping idem.ErrNoKey.
func Publish(ctx context.Context, cm *autopaho.ConnectionManager, id string, p *paho.Publish) (*paho.PublishResponse, error) {
	if strings.TrimSpace(id) == "" {
		return nil, fmt.Errorf("mqtt: publish to %s: %w", p.Topic, idem.ErrNoKey)
	}
	out := *p
	out.QoS = max(out.QoS, 1)
	props := paho.PublishProperties{}
	if p.Properties != nil {
		props = *p.Properties
	}
	props.User = nil
	if p.Properties != nil {
		for _, u := range p.Properties.User {
			if u.Key != PropertyID {
				props.User = append(props.User, u)
			}
		}
	}
	props.User.Add(PropertyID, id)
	out.Properties = &props
	res, err := cm.Publish(ctx, &out)
	if err != nil {
		return res, fmt.Errorf("mqtt: publish to %s: %w", p.Topic, err)
	}
	return res, nil
}
