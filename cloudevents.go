package idem

import (
	"strings"
)

// CloudEvents identifies an event by source and id together (the
// specification makes the pair unique). CloudEventsKey reads them from:
//
//   - binary mode: transport headers, with any of the protocol bindings'
//     prefixes: "ce_" (Kafka), "ce-" (HTTP), "cloudEvents:" / "cloudEvents_"
//     (AMQP), "Ce-" (NATS); and
//   - structured mode: a JSON event in the payload (content type
//     application/cloudevents+json, or any JSON object with "specversion").
//
// A message with neither is ErrNoKey; an event with a specversion but no
// source or id, or malformed JSON, is ErrInvalidKey. The key is
// "<source>|<id>" with "|" escaped inside the parts.
func CloudEventsKey(m Message) (string, error) {
	source, id, found, err := cloudEventsBinary(m)
	if err != nil {
		return "", err
	}
	if !found {
		source, id, found, err = cloudEventsStructured(m)
		if err != nil {
			return "", err
		}
	}
	if !found {
		return "", noKey("no CloudEvents attributes (binary headers or structured payload)")
	}
	return joinParts([]string{source, id}), nil
}

var cePrefixes = []string{"ce_", "ce-", "cloudEvents:", "cloudEvents_"}

func cloudEventsBinary(m Message) (source, id string, found bool, err error) {
	for _, p := range cePrefixes {
		id, source = m.Header(p+"id"), m.Header(p+"source")
		spec := m.Header(p + "specversion")
		if id == "" && source == "" && spec == "" {
			continue
		}
		if isBlank(id) || isBlank(source) {
			return "", "", false, invalidKey("CloudEvent in binary mode (%sspecversion=%q) lacks source or id", p, spec)
		}
		return source, id, true, nil
	}
	return "", "", false, nil
}

func cloudEventsStructured(m Message) (source, id string, found bool, err error) {
	ct := strings.ToLower(m.ContentType)
	structured := strings.HasPrefix(ct, "application/cloudevents")
	trimmed := strings.TrimSpace(string(m.Payload))
	if !structured && !strings.HasPrefix(trimmed, "{") {
		return "", "", false, nil
	}
	obj, derr := decodeObject(m.Payload)
	if derr != nil {
		if structured {
			return "", "", false, invalidKey("malformed structured CloudEvent: %v", derr)
		}
		return "", "", false, nil
	}
	_, hasSpec := obj["specversion"]
	if !structured && !hasSpec {
		return "", "", false, nil
	}
	for _, f := range []string{"source", "id"} {
		raw, ok := obj[f]
		if !ok {
			return "", "", false, invalidKey("structured CloudEvent lacks %q", f)
		}
		s, serr := scalar(raw)
		if serr != nil || strings.TrimSpace(s) == "" || raw[0] != '"' {
			return "", "", false, invalidKey("structured CloudEvent %q must be a non-empty string", f)
		}
		if f == "source" {
			source = s
		} else {
			id = s
		}
	}
	return source, id, true, nil
}
