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

// MaxDeliveriesError is reported to the guard's observer (idem.ErrorObserver) for each message
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
	Reason     string // the dead letter's reason: max_deliver, or no_key / invalid_key for a message without a usable key
	Err        error  // nil when dead-lettered or applied
}

func (e *MaxDeliveriesError) Error() string {
	switch {
	case e.Applied:
		return fmt.Sprintf("natsidem: JetStream gave up on %s #%d after %d deliveries; its key is completed: it was applied", e.Stream, e.Sequence, e.Deliveries)
	case e.Err != nil:
		return fmt.Sprintf("natsidem: JetStream gave up on %s #%d after %d deliveries and its dead letter failed: %v", e.Stream, e.Sequence, e.Deliveries, e.Err)
	}
	return fmt.Sprintf("natsidem: JetStream gave up on %s #%d after %d deliveries; dead-lettered (reason %s)", e.Stream, e.Sequence, e.Deliveries, e.Reason)
}

func (e *MaxDeliveriesError) Unwrap() error { return e.Err }

// advisoryPrefix is the subject prefix of JetStream's max-deliveries
// advisories, followed by "<stream>.<consumer>".
const advisoryPrefix = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."

// DefaultAdvisoryStream is the default of Options.AdvisoryStream.
const DefaultAdvisoryStream = "IDEM_ADVISORIES"

// advisoryAckWait is how soon an advisory whose Run died while handling
// it comes back to another: handling is a stream read, a store read and a
// publish.
const advisoryAckWait = 5 * time.Second

// advisoryRetention bounds how long a kept advisory waits for a Run.
const advisoryRetention = 7 * 24 * time.Hour

// watchMaxDeliveries handles the consumer's max-deliveries advisories
// until the returned function is called (it waits for a running handler).
// Without a MaxDeliver, a known consumer or a connection it does nothing.
//
// JetStream publishes an advisory once, on a core subject: a fleet that is
// down (or killed) when it is published never hears it, and its message
// would be gone for good (idem chaos --max-deliver 2 lost up to 14 of 6000
// orders so). So the advisories are kept in a stream of their own
// (Options.AdvisoryStream, created when missing, capturing every
// consumer's max-deliveries advisories) and read by a durable consumer
// per idem consumer, which the fleet's Runs share: each advisory is
// handled at least once, by one Run, and acknowledged only once its dead
// letter is durable or its key is known applied; one whose handling fails
// comes back. With AdvisoryStream "-", or when the stream cannot be made
// (no permission), every Run listens on a plain subscription instead (the
// failure is reported to the guard's observer): advisories raised while no
// Run is up are then missed. The dead letters' Nats-Msg-Id (one per
// consumer and stream sequence) makes the dead-letter stream drop repeats.
func (c *Consumer) watchMaxDeliveries(ctx context.Context, t *transport) (stop func(), err error) {
	info := c.cons.CachedInfo()
	nc := c.opts.JetStream.Conn()
	if info == nil || t.maxDeliver <= 0 || nc == nil {
		return func() {}, nil
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	wg := &inflight{}
	subject := advisoryPrefix + info.Stream + "." + info.Name
	if c.opts.AdvisoryStream != "-" {
		stop, err := c.keptAdvisories(wctx, t, subject, wg, info)
		if err == nil {
			return func() { stop(); cancel(); wg.close() }, nil
		}
		c.eng.ReportError(fmt.Errorf("natsidem: keep max-deliveries advisories in stream %s (listening on a plain subscription instead): %w", c.opts.AdvisoryStream, err))
	}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		if !wg.enter() {
			return
		}
		defer wg.leave()
		if wctx.Err() == nil {
			c.eng.ReportError(c.onMaxDeliveries(wctx, t, m.Data))
		}
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("natsidem: subscribe to %s: %w", subject, err)
	}
	return func() {
		_ = sub.Unsubscribe()
		cancel()
		wg.close()
	}, nil
}

// inflight counts running advisory handlers so that stopping waits for
// them; once closed it admits none (a callback arriving after the stop
// returns at once, never racing the wait).
type inflight struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func (f *inflight) enter() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.wg.Add(1)
	return true
}

func (f *inflight) leave() { f.wg.Done() }

func (f *inflight) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.wg.Wait()
}

// keptAdvisories makes sure the advisory stream exists and consumes the
// consumer's advisories from it with a durable consumer.
func (c *Consumer) keptAdvisories(ctx context.Context, t *transport, subject string, wg *inflight, info *jetstream.ConsumerInfo) (stop func(), err error) {
	js := c.opts.JetStream
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// A stream per idem consumer, capturing its advisories only: streams
	// of one account may not share subjects, and one stream listing every
	// consumer's subject would be updated by many processes at once.
	name := c.opts.AdvisoryStream + "_" + info.Stream + "_" + info.Name
	if _, err := js.Stream(sctx, name); errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(sctx, jetstream.StreamConfig{
			Name:        name,
			Description: "idem: JetStream's max-deliveries advisories of " + info.Stream + "/" + info.Name + ", kept until its consumers dead-letter what it gave up on",
			Subjects:    []string{subject},
			Retention:   jetstream.WorkQueuePolicy,
			MaxAge:      advisoryRetention,
			Storage:     jetstream.FileStorage,
		})
		if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	cons, err := js.CreateOrUpdateConsumer(sctx, name, jetstream.ConsumerConfig{
		Durable:       "idem_maxdeliver",
		Description:   "idem: dead-letters what " + info.Stream + "/" + info.Name + " gave up on",
		FilterSubject: subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       advisoryAckWait,
		MaxDeliver:    -1,
	})
	if err != nil {
		return nil, err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if !wg.enter() {
			return // stopped: it comes back after AckWait
		}
		defer wg.leave()
		if ctx.Err() != nil {
			return // shutting down: it comes back after AckWait
		}
		err := c.onMaxDeliveries(ctx, t, m.Data())
		c.eng.ReportError(err)
		var me *MaxDeliveriesError
		if errors.As(err, &me) && me.Err != nil && !errors.Is(me.Err, jetstream.ErrMsgNotFound) {
			_ = m.NakWithDelay(c.opts.Backoff(deliveries(m)))
			return
		}
		_ = m.Ack() // dead-lettered, applied, gone from the stream, or not an advisory at all
	})
	if err != nil {
		return nil, err
	}
	return cc.Stop, nil
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
			// The last try decides without the store when it cannot be
			// read: a message not known to be applied is dead-lettered.
			e.Err = c.deadLetterGivenUp(actx, t, raw, adv.Deliveries, e, attempt == 3)
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

func (c *Consumer) deadLetterGivenUp(ctx context.Context, t *transport, raw *jetstream.RawStreamMsg, deliveries uint64, e *MaxDeliveriesError, final bool) error {
	im := messageOf(raw.Header, raw.Data)
	res := idem.Result{}
	reason := ReasonMaxDeliver
	var cause error = fmt.Errorf("natsidem: JetStream gave up on the message after %d deliveries (its last delivery was never settled)", deliveries)
	if key, err := c.g.Key(im); err != nil {
		// No usable key: the handler never ran it; the dead letter says why.
		reason, cause = idem.DeadLetterReason(err), err
	} else {
		res.Key = key
		rec, err := c.g.Store().Get(ctx, key)
		switch {
		case err == nil:
			res.Record = rec
			fp, ferr := c.g.Fingerprint(im)
			if rec.State == idem.StateCompleted && ferr == nil && (fp == "" || rec.Fingerprint == "" || rec.Fingerprint == fp) {
				e.Applied = true
				return nil
			}
		case !errors.Is(err, idem.ErrNotFound) && !final:
			return fmt.Errorf("natsidem: read the record of %s: %w", key, err) // tried again
		}
	}
	md := &jetstream.MsgMetadata{Stream: e.Stream, NumDelivered: deliveries, Timestamp: raw.Time}
	md.Sequence.Stream = raw.Sequence
	h := broker.DeadLetterHeaders(ctx, c.g, im, res, cause, reason)
	e.Reason = h[idem.HeaderReason]
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
