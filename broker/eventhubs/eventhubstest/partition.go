package eventhubstest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgo/idem/internal/amqptest"
)

// partition is one partition of a hub: its events in sequence order,
// those the hub's retention has not removed, and the receivers reading
// it. Guarded by the server's lock.
type partition struct {
	h         *hub
	id        string
	events    []*event // retained: the first has sequence number begin
	begin     int64    // the sequence number of the first retained event, or of the next when none is
	last      *event   // the last event appended, retained or not; nil: none yet
	size      int64    // the offset of the next event
	receivers []*receiver
}

// event is one stored event.
type event struct {
	amqptest.Message
	seq      int64
	offset   int64
	enqueued time.Time
}

// encode is the event as delivered: its sections as sent, with the
// broker's annotations.
func (ev *event) encode() []byte {
	ann := slices.Clone(ev.Ann)
	ann = ann.Set(amqptest.Symbol("x-opt-sequence-number"), ev.seq)
	ann = ann.Set(amqptest.Symbol("x-opt-offset"), itoa(ev.offset))
	ann = ann.Set(amqptest.Symbol("x-opt-enqueued-time"), ev.enqueued)
	return ev.Encode(nil, nil, ann)
}

// append stores m as the partition's next event and hands it to the
// receivers with credit.
func (p *partition) append(m *amqptest.Message, now time.Time) {
	p.expire(now)
	ev := &event{Message: *m, seq: p.begin + int64(len(p.events)), offset: p.size, enqueued: now}
	p.size += int64(len(m.Body)) + 64 // a byte position, as Event Hubs' offsets are
	p.events = append(p.events, ev)
	p.last = ev
	p.pump()
}

// expire removes the events enqueued longer than the hub's retention
// before now, from the reads and from the earliest position.
func (p *partition) expire(now time.Time) {
	if p.h.retention <= 0 {
		return
	}
	cut := now.Add(-p.h.retention)
	n := 0
	for n < len(p.events) && p.events[n].enqueued.Before(cut) {
		n++
	}
	if n > 0 {
		p.events = slices.Delete(p.events, 0, n)
		p.begin += int64(n)
	}
}

// receiver is a partition receive link of one consumer group.
type receiver struct {
	*amqptest.Link
	p     *partition
	group string // lower-case
	epoch *int64 // the owner level; nil: none
	next  int64  // the sequence number of the next event to deliver
}

// pump sends every receiver of p the events it has credit for, in order;
// a receiver whose next event expired goes on from the earliest retained.
func (p *partition) pump() {
	p.expire(p.h.now())
	for _, r := range p.receivers {
		r.next = max(r.next, p.begin)
		for r.Credit() > 0 && r.next < p.begin+int64(len(p.events)) {
			r.Transfer(nil, true, p.events[r.next-p.begin].encode())
			r.next++
		}
	}
}

// start is the sequence number of the first event a receiver with filter
// reads, among the retained events:
// the start positions the client expresses as selector filters on the
// x-opt-offset, x-opt-sequence-number or x-opt-enqueued-time annotation
// (">" or ">=" a quoted value; offset '-1' is the earliest, '@latest'
// after the last event).
func (p *partition) start(filter string) (int64, error) {
	expr, ok := strings.CutPrefix(strings.TrimSpace(filter), "amqp.annotation.")
	fields := strings.Fields(expr)
	if !ok || len(fields) != 3 || (fields[1] != ">" && fields[1] != ">=") ||
		len(fields[2]) < 2 || fields[2][0] != '\'' || fields[2][len(fields[2])-1] != '\'' {
		return 0, fmt.Errorf("eventhubstest does not model the filter %q", filter)
	}
	inclusive := fields[1] == ">="
	value := fields[2][1 : len(fields[2])-1]
	p.expire(p.h.now())
	end := p.begin + int64(len(p.events))
	if fields[0] == "x-opt-offset" && value == "@latest" {
		return end, nil
	}
	n, err := strconv.ParseInt(value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("eventhubstest: filter %q: %v", filter, err)
	}
	var of func(*event) int64
	switch fields[0] {
	case "x-opt-offset":
		of = func(ev *event) int64 { return ev.offset }
	case "x-opt-sequence-number":
		of = func(ev *event) int64 { return ev.seq }
	case "x-opt-enqueued-time":
		of = func(ev *event) int64 { return ev.enqueued.UnixMilli() }
	default:
		return 0, fmt.Errorf("eventhubstest does not model the filter %q", filter)
	}
	for _, ev := range p.events {
		if v := of(ev); v > n || (inclusive && v == n) {
			return ev.seq, nil
		}
	}
	return end, nil
}

const stolen = "amqp:link:stolen"

// own applies owner levels when r attaches: a receiver with an owner
// level equal or higher than every other of its consumer group on the
// partition takes it, and those are detached with amqp:link:stolen; a
// receiver with a lower one, or none while an owner holds the partition,
// is refused (a non-empty description).
func (p *partition) own(r *receiver) string {
	var others []*receiver
	for _, x := range p.receivers {
		if x.group != r.group {
			continue
		}
		if x.epoch != nil && (r.epoch == nil || *x.epoch > *r.epoch) {
			mine := "none"
			if r.epoch != nil {
				mine = strconv.FormatInt(*r.epoch, 10)
			}
			return fmt.Sprintf("Receiver '%s' with a higher epoch of '%d' already exists on partition %s of %s (consumer group %s); receiver '%s' with epoch '%s' cannot be created.",
				x.Name, *x.epoch, p.id, p.h.name, r.group, r.Name, mine)
		}
		others = append(others, x)
	}
	if r.epoch == nil {
		return ""
	}
	for _, x := range others {
		old := "none"
		if x.epoch != nil {
			old = strconv.FormatInt(*x.epoch, 10)
		}
		x.Detach(stolen, fmt.Sprintf("New receiver '%s' with higher epoch of '%d' is created hence current receiver '%s' with epoch '%s' is getting disconnected. If you are recreating the receiver, make sure a higher epoch is used.",
			r.Name, *r.epoch, x.Name, old))
	}
	return ""
}

func (p *partition) drop(r *receiver) {
	if i := slices.Index(p.receivers, r); i >= 0 {
		p.receivers = slices.Delete(p.receivers, i, i+1)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
