package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
)

// pendingTicket is a claimed ticket whose record waits in the partition's
// queue for its turn.
type pendingTicket struct {
	rec *kgo.Record
	t   *idem.Ticket
}

// batchClaims reports whether Run claims queued records in batches: the
// store claims many keys in one round trip and MaxClaimBatch allows more
// than one.
func (c *Consumer) batchClaims() bool {
	_, ok := c.g.Store().(idem.BatchStore)
	return ok && c.opts.MaxClaimBatch > 1
}

// processBatch is process for Run with batch claims: the head record runs
// under its ticket from the partition's current batch, claiming a new batch
// from the head on when none is pending. A record that is not done (held for
// a retry) releases the batch's unrun tickets, so nothing behind it holds a
// claim while it waits, and its retry is claimed on its own, as Guard.Do
// would.
func (c *Consumer) processBatch(p *partition, rec *kgo.Record, h Handler) (bool, time.Duration) {
	handler := func(ctx context.Context) ([]byte, error) { return h(ctx, rec) }
	t := c.ticket(p, rec)
	done, hold := c.process(p, rec, func(ctx context.Context, rec *kgo.Record) (idem.Result, error) {
		if t == nil {
			return c.g.Do(ctx, MessageOf(rec), handler)
		}
		return t.Do(ctx, handler)
	})
	if !done {
		p.releasePending()
	}
	return done, hold
}

// ticket returns the head record's ticket: the next pending one, or the
// first of a batch claimed now over the queued records from the head on (at
// most MaxClaimBatch). It returns nil when the record is to be claimed on its
// own: it is being retried, or the batch claim failed (the error is
// reported; the single claim meets the store's state itself and is observed
// and decided as always).
func (c *Consumer) ticket(p *partition, rec *kgo.Record) *idem.Ticket {
	if len(p.pending) > 0 && p.pending[0].rec == rec {
		t := p.pending[0].t
		p.pending[0] = pendingTicket{}
		p.pending = p.pending[1:]
		return t
	}
	p.releasePending() // not the head's batch (never expected): give it back
	if p.attempts > 0 {
		return nil
	}
	recs := p.queued(c.opts.MaxClaimBatch)
	if len(recs) == 0 || recs[0] != rec {
		return nil
	}
	msgs := make([]idem.Message, len(recs))
	for i, r := range recs {
		msgs[i] = MessageOf(r)
	}
	tickets, err := c.g.ClaimBatch(p.ctx, msgs)
	if err != nil {
		if p.ctx.Err() == nil {
			c.reportError(fmt.Errorf("kafka: claim batch %s/%d from offset %d: %w", p.topic, p.partition, rec.Offset, err))
		}
		return nil
	}
	p.pending = p.pending[:0]
	for i := 1; i < len(tickets); i++ {
		p.pending = append(p.pending, pendingTicket{rec: recs[i], t: tickets[i]})
	}
	return tickets[0]
}

// releasePending gives back the keys of the tickets claimed but not run, so
// that a retry, the partition's next owner or a restart claims them at once
// instead of after their lease. One StoreTimeout bounds the whole pass: a
// store that is down must not hold a drain or a retry for a timeout per
// ticket (what is not released expires with its lease).
func (p *partition) releasePending() {
	if len(p.pending) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), p.c.g.Options().StoreTimeout)
	defer cancel()
	var errs []error
	for i, pt := range p.pending {
		if err := pt.t.Release(ctx); err != nil && !errors.Is(err, idem.ErrLeaseLost) && !errors.Is(err, idem.ErrNotFound) {
			errs = append(errs, err)
		}
		p.pending[i] = pendingTicket{}
	}
	if len(errs) > 0 {
		p.c.reportError(fmt.Errorf("kafka: release %d of %d unrun claims of %s/%d: %w", len(errs), len(p.pending), p.topic, p.partition, errs[0]))
	}
	p.pending = p.pending[:0]
}
