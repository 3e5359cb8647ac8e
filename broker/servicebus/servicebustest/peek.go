package servicebustest

import "github.com/idemgo/idem/internal/amqptest"

// peek answers com.microsoft:peek-message: up to message-count messages
// of the entity from from-sequence-number on, in sequence order, whatever
// their lock (a peek neither locks nor counts a delivery), each encoded as
// delivered inside {"messages": [{"message": <binary>}, ...]}; 204 when
// there is none
// (https://learn.microsoft.com/azure/service-bus-messaging/message-browsing).
// An operator's tool lists a dead-letter queue this way without touching
// it. session, when set, limits the peek to that session's messages: a
// session receiver browses its own session.
func (s *Server) peek(e *entity, value amqptest.Map, session ...string) (int, string, string, any) {
	from, count := int64(0), 1
	if v, ok := value.Get("from-sequence-number"); ok {
		from = int64(amqptest.AsUint(v))
	}
	if v, ok := value.Get("message-count"); ok {
		count = int(amqptest.AsUint(v))
	}
	var out []any
	for _, m := range e.msgs {
		if len(out) >= count {
			break
		}
		if m.seq < from || (len(session) > 0 && m.sessionID != session[0]) {
			continue
		}
		out = append(out, amqptest.Pairs("message", m.encode(false)))
	}
	if len(out) == 0 {
		return 204, "No Content", "", nil
	}
	return 200, "OK", "", amqptest.Pairs("messages", out)
}
