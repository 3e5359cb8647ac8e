package demo

import (
	"encoding/binary"
	"hash/fnv"
	"sync"
)

// fault is what the chaos monkey does to one delivery.
type fault int

const (
	faultNone fault = iota
	// faultCrash: the consumer commits its work and dies before acking; the
	// broker redelivers after the ack wait, to whichever consumer is alive.
	faultCrash
	// faultAckLost: the consumer acks but the ack never reaches the broker.
	faultAckLost
	// faultHandler: the handler fails transiently (a timeout downstream);
	// the claim is released and the message retried.
	faultHandler
)

// maxFaultyDelivery bounds the chaos: from this delivery of a message on,
// nothing is injected, so every run ends.
const maxFaultyDelivery = 5

// chaos decides the fault for one delivery from the seed, the message's
// stream sequence and its delivery count alone, so a seed injects the same
// faults whichever consumer happens to receive the message, and the idem and
// naive consumers suffer the same ones.
func chaos(seed, seq, delivery uint64, crashRate float64) fault {
	if delivery >= maxFaultyDelivery || crashRate <= 0 {
		return faultNone
	}
	h := fnv.New64a()
	var b [24]byte
	binary.LittleEndian.PutUint64(b[0:], seed)
	binary.LittleEndian.PutUint64(b[8:], seq)
	binary.LittleEndian.PutUint64(b[16:], delivery)
	h.Write(b[:])
	x := float64(h.Sum64()>>11) / (1 << 53)
	switch {
	case x < crashRate:
		return faultCrash
	case x < crashRate*1.5:
		return faultAckLost
	case x < crashRate*2:
		return faultHandler
	}
	return faultNone
}

// tryFaults draws the chaos for each try of a message once, for its
// handler and its hooks alike, on a stream that counts no deliveries
// (Kafka, Event Hubs): a try is numbered by the idem side's count of the
// message's deliveries (side.attempt), drawn at its first use and
// forgotten when the try is settled. M is the message as the consumer
// holds it (a failed one is tried again in place, the same M); seq reads
// its sequence.
type tryFaults[M comparable] struct {
	r   *runner
	seq func(M) uint64
	mu  sync.Mutex
	f   map[M]fault
}

func newTryFaults[M comparable](r *runner, seq func(M) uint64) *tryFaults[M] {
	return &tryFaults[M]{r: r, seq: seq, f: map[M]fault{}}
}

func (t *tryFaults[M]) of(m M) fault {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.f[m]
	if !ok {
		seq := t.seq(m)
		f = chaos(t.r.cfg.Seed, seq, t.r.idem.attempt(seq), t.r.cfg.CrashRate)
		t.f[m] = f
	}
	return f
}

func (t *tryFaults[M]) done(m M) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.f, m)
}
