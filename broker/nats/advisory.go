package natsidem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// MaxDeliveriesError is reported through Hooks.OnError for each message
// JetStream gave up on at the consumer's MaxDeliver (its max-deliveries
// advisory): a last delivery that went to a consumer which died, or lost
// its connection, before settling it. Applied says its key was completed
// in the store with its content (it had been applied; nothing was
// written); otherwise it was dead-lettered from the stream, unless Err
// says why that failed.
type MaxDeliveriesError struct {
	Stream     string
	Sequence   uint64 // the stream sequence
	Deliveries uint64
	Applied    bool
	Err        error // nil when dead-lettered or applied
}

func (e *MaxDeliveriesError) Error() string {
	switch {
	case e.Applied:
		return fmt.Sprintf("natsidem: JetStream gave up on %s #%d after %d deliveries; its key is completed: it was applied", e.Stream, e.Sequence, e.Deliveries)
	case e.Err != nil:
		return fmt.Sprintf("natsidem: JetStream gave up on %s #%d after %d deliveries and its dead letter failed: %v", e.Stream, e.Sequence, e.Deliveries, e.Err)
	}
	return fmt.Sprintf("natsidem: JetStream gave up on %s #%d after %d deliveries; dead-lettered (reason %s)", e.Stream, e.Sequence, e.Deliveries, ReasonMaxDeliver)
}

func (e *MaxDeliveriesError) Unwrap() error { return e.Err }

// watchMaxDeliveries subscribes to the consumer's max-deliveries advisory
// until the returned function is called (it waits for a running handler).
// Without a MaxDeliver, a known consumer or a connection it does nothing.
//
// Every Run of the fleet handles every advisory, on a plain subscription:
// an advisory is published once, at most once, and a queue group handed
// it to one Run, so a Run killed with advisories queued or in hand lost
// their messages for good (idem chaos --max-deliver 2 lost 7 to 14 of 6000
// orders so). The dead letters' Nats-Msg-Id (one per consumer and stream
// sequence) makes the dead-letter stream drop the repeats (nats-server
// 2.9 was seen keeping two published at the same moment: dead-lettering
// is at least once).
func (c *Consumer) watchMaxDeliveries(ctx context.Context, t *transport) (stop func(), err error) {
	info := c.cons.CachedInfo()
	nc := c.opts.JetStream.Conn()
	if info == nil || t.maxDeliver <= 0 || nc == nil {
		return func() {}, nil
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	subject := "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + info.Stream + "." + info.Name
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		wg.Add(1)
		defer wg.Done()
		if wctx.Err() == nil {
			c.opts.Hooks.CallOnError(c.onMaxDeliveries(wctx, t, m.Data))
		}
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("natsidem: subscribe to %s: %w", subject, err)
	}
	return func() {
		_ = sub.Unsubscribe()
		cancel()
		wg.Wait()
	}, nil
}

// onMaxDeliveries handles one advisory: the message is read from the
// stream by its sequence; a key completed with its content was applied,
// anything else is dead-lettered (what is not known to be applied must
// not vanish).
func (c *Consumer) onMaxDeliveries(ctx context.Context, t *transport, data []byte) error {
	var adv struct {
		Stream     string `json:"stream"`
		StreamSeq  uint64 `json:"stream_seq"`
		Deliveries uint64 `json:"deliveries"`
	}
	if err := json.Unmarshal(data, &adv); err != nil {
		return fmt.Errorf("natsidem: max-deliveries advisory: %w", err)
	}
	e := &MaxDeliveriesError{Stream: adv.Stream, Sequence: adv.StreamSeq, Deliveries: adv.Deliveries}
	timeout := max(c.g.Options().StoreTimeout, 5*time.Second)
	var raw *jetstream.RawStreamMsg
	for attempt := 1; ; attempt++ {
		e.Err = nil
		actx, cancel := context.WithTimeout(ctx, timeout)
		raw, e.Err = getStreamMsg(actx, c.opts.JetStream, adv.Stream, adv.StreamSeq)
		if e.Err == nil {
			e.Err = c.deadLetterGivenUp(actx, t, raw, adv.Deliveries, e)
		}
		cancel()
		if e.Err == nil || errors.Is(e.Err, jetstream.ErrMsgNotFound) || attempt == 3 || !sleepCtx(ctx, c.opts.Backoff(attempt)) {
			return e
		}
	}
}

func getStreamMsg(ctx context.Context, js jetstream.JetStream, stream string, seq uint64) (*jetstream.RawStreamMsg, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	return s.GetMsg(ctx, seq)
}

func (c *Consumer) deadLetterGivenUp(ctx context.Context, t *transport, raw *jetstream.RawStreamMsg, deliveries uint64, e *MaxDeliveriesError) error {
	im := messageOf(raw.Header, raw.Data)
	res := idem.Result{}
	if key, err := c.g.Key(im); err == nil {
		res.Key = key
		if rec, err := c.g.Store().Get(ctx, key); err == nil {
			res.Record = rec
			fp, ferr := c.g.Fingerprint(im)
			if rec.State == idem.StateCompleted && ferr == nil && (fp == "" || rec.Fingerprint == "" || rec.Fingerprint == fp) {
				e.Applied = true
				return nil
			}
		}
	}
	md := &jetstream.MsgMetadata{Stream: e.Stream, NumDelivered: deliveries, Timestamp: raw.Time}
	md.Sequence.Stream = raw.Sequence
	cause := fmt.Errorf("natsidem: JetStream gave up on the message after %d deliveries (its last delivery was never settled)", deliveries)
	h := broker.DeadLetterHeaders(c.g, im, res, cause, ReasonMaxDeliver)
	return t.publishDeadLetter(ctx, raw.Subject, raw.Header, raw.Data, md, h)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
