package idem

import (
	"strings"
)

// Message is what the guard needs from a delivery: the producer-assigned id
// (if any), transport headers or attributes, and the payload. Broker
// integrations fill it from their own message types.
//
// Never put a transport value that changes on redelivery (a delivery tag, a
// receive timestamp, a lock token) in ID: the key must survive redelivery.
type Message struct {
	ID          string            // producer-assigned message id (AMQP message-id, Nats-Msg-Id, ...)
	Headers     map[string]string // headers / application properties / attributes
	Payload     []byte            // the body, fingerprinted by default
	ContentType string            // e.g. application/cloudevents+json for structured CloudEvents

	// CorrelationID is the broker's own correlation id where it has one
	// (AMQP correlation-id, Service Bus CorrelationId): it ties the message
	// to a flow, never identifies it, so it is not a key. See
	// Options.Correlation.
	CorrelationID string
}

// Header returns the value of the named header, matched case-insensitively
// when no exact match exists.
func (m Message) Header(name string) string {
	if v, ok := m.Headers[name]; ok {
		return v
	}
	for k, v := range m.Headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}
