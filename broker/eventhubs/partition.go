package eventhubs

import (
	"context"
	"errors"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// partition is the worker of one owned partition: it receives a batch,
// hands each event in order to the engine's processor
// (broker.Processor.ProcessUntil), tries an event again after the
// report's delay until it is done, and checkpoints the last event done
// after each batch.
type partition struct {
	c        *Consumer
	pc       *azeventhubs.ProcessorPartitionClient
	proc     *broker.Processor[*azeventhubs.ReceivedEventData]
	attempts int // tries of the current event in this process
}

// work runs until stop closes (ctx is the handlers' hard stop) or the
// partition's ownership is lost, then checkpoints and closes the
// partition client.
func (p *partition) work(ctx context.Context, stop <-chan struct{}) {
	p.proc = p.c.eng.Processor(transport{p: p})
	ctx = context.WithValue(ctx, partitionKey{}, p.pc) // for HandleCheckpoint
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		p.pc.Close(cctx)
		cancel()
	}()
	for !stopped(stop) {
		rctx, cancel := context.WithTimeout(ctx, p.c.opts.ReceiveWait)
		evs, err := p.pc.ReceiveEvents(rctx, p.c.opts.BatchSize, nil)
		cancel()
		var ehErr *azeventhubs.Error
		if errors.As(err, &ehErr) && ehErr.Code == azeventhubs.ErrorCodeOwnershipLost {
			return // another instance owns it now; it starts from the checkpoint
		}
		var last *azeventhubs.ReceivedEventData
		for _, ev := range evs {
			if !p.process(ctx, stop, ev) {
				break
			}
			last = ev
		}
		if last != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			if err := p.pc.UpdateCheckpoint(cctx, last, nil); err != nil {
				p.c.eng.ReportError(err)
			}
			cancel()
		}
		if last == nil && len(evs) > 0 {
			return // stopped on the first event: it is read again from the checkpoint
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			p.c.eng.ReportError(err)
			if !sleep(p.c.eng.Options().Backoff(1), stop) {
				return
			}
		}
	}
}

// process tries ev until it is done (true) or the partition stops
// (false: ev is not done).
func (p *partition) process(ctx context.Context, stop <-chan struct{}, ev *azeventhubs.ReceivedEventData) bool {
	p.attempts = 0
	for {
		select {
		case p.c.sem <- struct{}{}:
		case <-stop:
			return false
		}
		p.attempts++
		r := p.proc.ProcessUntil(ctx, stop, ev)
		<-p.c.sem
		if r.Action == idem.ActionAck || (r.Action == idem.ActionDeadLetter && r.BrokerErr == nil) {
			return true
		}
		if ctx.Err() != nil || !sleep(r.Delay, stop) {
			return false
		}
	}
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// sleep waits d; false when stop closed meanwhile.
func sleep(d time.Duration, stop <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	}
}

// transport settles one partition's events for the engine's processor.
// Event Hubs has no per-event settle: Ack and Retry do nothing (the
// partition moves on, or tries the event again itself), and the
// checkpoint is the partition's.
type transport struct{ p *partition }

// Message is MessageOf(ev).
func (transport) Message(ev *azeventhubs.ReceivedEventData) idem.Message { return MessageOf(ev) }

// Delivery is the event's try in this process: Event Hubs counts no
// deliveries and has no limit (never Last).
func (t transport) Delivery(*azeventhubs.ReceivedEventData) broker.Delivery {
	return broker.Delivery{Attempt: max(t.p.attempts, 1)}
}

// Ack does nothing: the partition checkpoints after its batch.
func (transport) Ack(context.Context, *azeventhubs.ReceivedEventData) error { return nil }

// Retry does nothing: the event is tried again in place, its partition
// waiting.
func (transport) Retry(context.Context, *azeventhubs.ReceivedEventData, time.Duration) error {
	return nil
}

// SettlesInPlace reports that Ack and Retry do nothing at the broker
// (broker.InPlace).
func (transport) SettlesInPlace() bool { return true }

// DeadLetter sends the dead letter to the dead-letter hub and returns
// once it is accepted.
func (t transport) DeadLetter(ctx context.Context, ev *azeventhubs.ReceivedEventData, d broker.DeadLetter) error {
	return send(ctx, t.p.c.opts.DeadLetter, ev.PartitionKey, DeadLetter(t.p.c.opts.EventHub, t.p.pc.PartitionID(), ev, d.Headers))
}
