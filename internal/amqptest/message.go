package amqptest

import (
	"errors"
	"fmt"
)

// Message is a message as a client sent it: its sections, kept encoded
// where the server never looks into them.
type Message struct {
	Header   []any  // the header section's fields
	Ann      Map    // message annotations
	Props    []any  // the properties section's fields (nil: none sent)
	AppProps Map    // application properties
	Body     []byte // the body sections and the footer, encoded
}

// ID is the properties' message-id as a string ("" when none).
func (m *Message) ID() string {
	switch id := Field(m.Props, 0).(type) {
	case string:
		return id
	case nil:
		return ""
	default:
		return fmt.Sprint(id)
	}
}

// Value is the message's amqp-value body (nil when it has none).
func (m *Message) Value() any {
	d := NewDecoder(m.Body)
	for d.More() {
		v, err := d.Value()
		if err != nil {
			return nil
		}
		if dv, ok := v.(Described); ok && AsUint(dv.Desc) == CodeValue {
			return dv.Value
		}
	}
	return nil
}

// ParseMessage decodes one encoded message.
func ParseMessage(b []byte) (*Message, error) {
	m := &Message{}
	d := NewDecoder(b)
	for d.More() {
		start := d.i
		v, err := d.Value()
		if err != nil {
			return nil, err
		}
		dv, ok := v.(Described)
		if !ok {
			return nil, errors.New("amqp: message section is not described")
		}
		switch AsUint(dv.Desc) {
		case CodeHeader:
			m.Header, _ = dv.Value.([]any)
		case CodeDeliveryAnn:
		case CodeMessageAnn:
			m.Ann, _ = dv.Value.(Map)
		case CodeProperties:
			m.Props, _ = dv.Value.([]any)
			if m.Props == nil {
				m.Props = []any{}
			}
		case CodeAppProperties:
			m.AppProps, _ = dv.Value.(Map)
		default:
			m.Body = append(m.Body, b[start:d.i]...)
		}
	}
	return m, nil
}

// ParseBatch decodes what a client sent in format: the envelope, and the
// messages it holds (each data section of a BatchMessageFormat envelope
// is one message; any other envelope is the one message).
func ParseBatch(format uint32, b []byte) (envelope *Message, msgs []*Message, err error) {
	env, err := ParseMessage(b)
	if err != nil {
		return nil, nil, err
	}
	if format != BatchMessageFormat {
		return env, []*Message{env}, nil
	}
	d := NewDecoder(env.Body)
	for d.More() {
		v, err := d.Value()
		if err != nil {
			return nil, nil, err
		}
		dv, ok := v.(Described)
		if !ok || AsUint(dv.Desc) != CodeData {
			continue
		}
		data, _ := dv.Value.([]byte)
		one, err := ParseMessage(data)
		if err != nil {
			return nil, nil, err
		}
		msgs = append(msgs, one)
	}
	return env, msgs, nil
}

// Encode is m as a broker delivers it: header (m's when nil), the
// delivery annotations when not nil, the message annotations (m's when
// nil), the properties, the application properties, and the body.
func (m *Message) Encode(header []any, deliveryAnn, ann Map) []byte {
	if header == nil {
		header = m.Header
	}
	if ann == nil {
		ann = m.Ann
	}
	e := Encoder{}
	e.Value(Perf(CodeHeader, header...))
	if deliveryAnn != nil {
		e.Value(Described{Desc: uint64(CodeDeliveryAnn), Value: deliveryAnn})
	}
	if ann != nil {
		e.Value(Described{Desc: uint64(CodeMessageAnn), Value: ann})
	}
	props := m.Props
	if props == nil {
		props = []any{}
	}
	e.Value(Described{Desc: uint64(CodeProperties), Value: props})
	if len(m.AppProps) > 0 {
		e.Value(Described{Desc: uint64(CodeAppProperties), Value: m.AppProps})
	}
	e.Append(m.Body)
	return e.b
}
