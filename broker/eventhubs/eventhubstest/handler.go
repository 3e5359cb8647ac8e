package eventhubstest

import (
	"strings"

	"github.com/idemgo/idem/internal/amqptest"
)

// handler is the Event Hubs behind the AMQP core. Its methods run under
// the core's lock.
type handler struct{ s *Server }

const selectorFilter = "apache.org:selector-filter:string"

func (h handler) Attach(l *amqptest.Link) {
	s := h.s
	switch l.Kind {
	case amqptest.KindRPCIn, amqptest.KindRPCOut:
		l.Accept(nil, nil)
	case amqptest.KindSend:
		if _, _, err := s.sendTarget(l.Address); err != "" {
			l.Refuse("amqp:not-found", err)
			return
		}
		l.Accept(nil, nil)
	case amqptest.KindReceive:
		s.attachReceiver(l)
	}
}

// sendTarget is the hub of a sender's address "<hub>" or
// "<hub>/Partitions/<id>", and the partition (nil: the hub chooses).
func (s *Server) sendTarget(addr string) (*hub, *partition, string) {
	parts := strings.Split(strings.Trim(addr, "/"), "/")
	hb := s.hubs[strings.ToLower(parts[0])]
	if hb == nil {
		return nil, nil, "no event hub " + parts[0]
	}
	switch {
	case len(parts) == 1:
		return hb, nil, ""
	case len(parts) == 3 && strings.EqualFold(parts[1], "Partitions"):
		if p := hb.partition(parts[2]); p != nil {
			return hb, p, ""
		}
	}
	return nil, nil, "no partition at " + addr
}

// attachReceiver attaches a partition receiver at
// "<hub>/ConsumerGroups/<group>/Partitions/<id>", from the start its
// selector filter names, with the owner level of its com.microsoft:epoch
// property.
func (s *Server) attachReceiver(l *amqptest.Link) {
	parts := strings.Split(strings.Trim(l.Address, "/"), "/")
	if len(parts) != 5 || !strings.EqualFold(parts[1], "ConsumerGroups") || !strings.EqualFold(parts[3], "Partitions") {
		l.Refuse("amqp:not-found", "no partition at "+l.Address+" (a receiver reads <hub>/ConsumerGroups/<group>/Partitions/<id>)")
		return
	}
	hb := s.hubs[strings.ToLower(parts[0])]
	if hb == nil {
		l.Refuse("amqp:not-found", "no event hub "+parts[0])
		return
	}
	group := strings.ToLower(parts[2])
	if !hb.groups[group] {
		l.Refuse("amqp:not-found", "no consumer group "+parts[2]+" in "+hb.name)
		return
	}
	p := hb.partition(parts[4])
	if p == nil {
		l.Refuse("amqp:not-found", "no partition "+parts[4]+" in "+hb.name)
		return
	}
	filters, _ := amqptest.Field(l.SourceFields, 7).(amqptest.Map)
	expr := "amqp.annotation.x-opt-offset > '@latest'"
	for _, f := range filters {
		if amqptest.AsString(f.K) != selectorFilter {
			l.Refuse("amqp:not-implemented", "eventhubstest does not model the filter "+amqptest.AsString(f.K))
			return
		}
		if dv, ok := f.V.(amqptest.Described); ok {
			expr = amqptest.AsString(dv.Value)
		}
	}
	next, err := p.start(expr)
	if err != nil {
		l.Refuse("amqp:not-implemented", err.Error())
		return
	}
	r := &receiver{Link: l, p: p, group: group, next: next}
	props, _ := amqptest.Field(l.AttachFields, 13).(amqptest.Map)
	if v, ok := props.Get("com.microsoft:epoch"); ok {
		e := int64(amqptest.AsUint(v))
		r.epoch = &e
	}
	l.Data = r
	if msg := p.own(r); msg != "" {
		// Attached, then detached at once, as Event Hubs does: the
		// client reports it as a lost ownership, not a lost connection.
		l.Accept(nil, nil)
		l.Detach(stolen, msg)
		return
	}
	l.Accept(nil, nil)
	p.receivers = append(p.receivers, r)
}

// Receive stores what a sender sent: one event or a batch, to the
// partition of its link, of its partition key, or the next in turn.
func (h handler) Receive(l *amqptest.Link, format uint32, body []byte) amqptest.Described {
	s := h.s
	if uint64(len(body)) > s.maxSize {
		return amqptest.Perf(amqptest.CodeRejected, amqptest.Error("amqp:link:message-size-exceeded",
			"The received message exceeds the maximum message size of the link.", nil))
	}
	hb, p, errText := s.sendTarget(l.Address)
	if errText != "" {
		return amqptest.Perf(amqptest.CodeRejected, amqptest.Error("amqp:not-found", errText, nil))
	}
	env, msgs, err := amqptest.ParseBatch(format, body)
	if err != nil {
		return amqptest.Perf(amqptest.CodeRejected, amqptest.Error("amqp:decode-error", err.Error(), nil))
	}
	if p == nil {
		key, hasKey := env.Ann.Get("x-opt-partition-key")
		p = hb.partitionFor(amqptest.AsString(key), hasKey)
	}
	now := hb.now()
	for _, m := range msgs {
		p.append(m, now)
	}
	return amqptest.Perf(amqptest.CodeAccepted)
}

func (h handler) Flow(l *amqptest.Link) {
	if r, ok := l.Data.(*receiver); ok {
		r.p.pump()
	}
}

// Settle: events are sent settled, so no disposition comes back.
func (h handler) Settle(_ *amqptest.Link, _ any, state any) any { return state }

func (h handler) Detached(l *amqptest.Link) {
	if r, ok := l.Data.(*receiver); ok {
		r.p.drop(r)
	}
}

// Request answers the management operations the client uses: READ of
// the hub's properties and of a partition's.
func (h handler) Request(l *amqptest.Link, req *amqptest.Message) amqptest.Reply {
	get := func(k string) string { v, _ := req.AppProps.Get(k); return amqptest.AsString(v) }
	op, typ := get("operation"), get("type")
	if l.Address != "$management" || op != "READ" || (typ != "com.microsoft:eventhub" && typ != "com.microsoft:partition") {
		return amqptest.Reply{Code: 404, Condition: "amqp:not-implemented",
			Description: "eventhubstest does not model the operation " + op + " " + typ + " on " + l.Address + " (refused, not retried)"}
	}
	hb := h.s.hubs[strings.ToLower(get("name"))]
	if hb == nil {
		return amqptest.Reply{Code: 404, Condition: "amqp:not-found", Description: "no event hub " + get("name")}
	}
	if typ == "com.microsoft:eventhub" {
		ids := make(amqptest.Array, len(hb.partitions))
		for i, p := range hb.partitions {
			ids[i] = p.id
		}
		return amqptest.OK(amqptest.Pairs("name", hb.name, "type", typ, "created_at", hb.created,
			"partition_count", int32(len(hb.partitions)), "partition_ids", ids, "georeplication_factor", int32(1)))
	}
	p := hb.partition(get("partition"))
	if p == nil {
		return amqptest.Reply{Code: 404, Condition: "amqp:not-found", Description: "no partition " + get("partition") + " in " + hb.name}
	}
	p.expire(hb.now())
	last, lastOffset, lastTime := int64(-1), "-1", hb.created
	if ev := p.last; ev != nil {
		last, lastOffset, lastTime = ev.seq, itoa(ev.offset), ev.enqueued
	}
	return amqptest.OK(amqptest.Pairs("name", hb.name, "type", typ, "partition", p.id,
		"begin_sequence_number", p.begin, "last_enqueued_sequence_number", last,
		"last_enqueued_offset", lastOffset, "last_enqueued_time_utc", lastTime,
		"is_partition_empty", len(p.events) == 0))
}
