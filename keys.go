package idem

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// KeyFunc extracts the stable id of a message. It returns an error wrapping
// ErrNoKey when the message has none and ErrInvalidKey when it is malformed.
// Any function of this type is a user-defined extractor.
type KeyFunc func(Message) (string, error)

// MessageID uses the producer-assigned Message.ID. It is the default.
func MessageID(m Message) (string, error) {
	if isBlank(m.ID) {
		return "", noKey("message has no producer-assigned id")
	}
	return m.ID, nil
}

// HeaderKey uses the value of a header (Kafka has no message id: producers
// put one in a header such as "idempotency-key").
func HeaderKey(name string) KeyFunc {
	return func(m Message) (string, error) {
		v := m.Header(name)
		if isBlank(v) {
			return "", noKey("header %q is missing or empty", name)
		}
		return v, nil
	}
}

// JSONFieldsKey builds a business key from top-level fields of a JSON payload
// (for example "tenant", "order_id"), joined in the given order. Numbers and
// strings are used as they appear; a missing or null field is ErrNoKey.
func JSONFieldsKey(fields ...string) KeyFunc {
	return func(m Message) (string, error) {
		obj, err := decodeObject(m.Payload)
		if err != nil {
			return "", invalidKey("payload is not a JSON object: %v", err)
		}
		parts := make([]string, len(fields))
		for i, f := range fields {
			raw, ok := obj[f]
			if !ok || string(raw) == "null" {
				return "", noKey("JSON field %q is missing", f)
			}
			s, err := scalar(raw)
			if err != nil {
				return "", invalidKey("JSON field %q: %v", f, err)
			}
			if isBlank(s) {
				return "", noKey("JSON field %q is empty", f)
			}
			parts[i] = s
		}
		return joinParts(parts), nil
	}
}

// Composite joins the ids extracted by several functions into one key (for
// example a tenant header and a business id from the payload). Every part is
// required.
func Composite(parts ...KeyFunc) KeyFunc {
	return func(m Message) (string, error) {
		vals := make([]string, len(parts))
		for i, p := range parts {
			v, err := p(m)
			if err != nil {
				return "", err
			}
			vals[i] = v
		}
		return joinParts(vals), nil
	}
}

// FirstOf tries each function in order and uses the first that finds a key.
// Errors other than ErrNoKey stop the search.
func FirstOf(fns ...KeyFunc) KeyFunc {
	return func(m Message) (string, error) {
		var last error = noKey("no extractor found a key")
		for _, f := range fns {
			v, err := f(m)
			if err == nil {
				return v, nil
			}
			if !isNoKey(err) {
				return "", err
			}
			last = err
		}
		return "", last
	}
}

// joinParts joins key parts with a separator that is escaped inside parts, so
// ("a|b","c") and ("a","b|c") never collide.
func joinParts(parts []string) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('|')
		}
		b.WriteString(strings.NewReplacer(`\`, `\\`, `|`, `\|`).Replace(p))
	}
	return b.String()
}

func decodeObject(payload []byte) (map[string]json.RawMessage, error) {
	var obj map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, fmt.Errorf("null")
	}
	return obj, nil
}

// scalar renders a JSON string or number as text; objects, arrays and
// booleans are not keys.
func scalar(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", fmt.Errorf("empty value")
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return s, nil
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return string(raw), nil
	}
	return "", fmt.Errorf("not a string or number: %.20s", raw)
}

func isNoKey(err error) bool {
	ke, ok := err.(*KeyError)
	return ok && ke.Err == ErrNoKey
}
