package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
)

// Batch claims. With a store that claims many keys in one round trip (an
// idem.BatchStore) and a two-phase handler, a partition claims its queued
// records together, from the head on (idem.Guard.ClaimBatch), and each
// record then runs under its ticket (broker.Handler.RunTicket): one round
// trip per batch instead of one per record. A transactional handler marks
// its key inside the record's own transaction, which cannot be taken
// ahead, so it claims each record in its turn.

// ahead is a ticket claimed for a queued record, waiting for the record's
// turn.
type ahead struct {
	rec *kgo.Record
	t   *idem.Ticket
}

// claimsAhead reports whether the consumer claims in batches: the store
// has batch claims, maxBatch allows more than one record, and h runs under
// tickets (a Handle handler; not HandleTx, nor HandleCheckpoint, whose
// transactions hold no claims).
func claimsAhead(g *idem.Guard, h Handler, maxBatch int) (bool, error) {
	if _, ok := g.Store().(idem.BatchStore); !ok || maxBatch <= 1 || h.cp != nil {
		return false, nil
	}
	return runsTickets(g, h)
}

// runsTickets asks h whether it runs under a ticket, with a ticket already
// given back: RunTicket answers ok without running anything (the spent
// ticket's Do returns idem.ErrTicketUsed at once), and the probe touches no
// store, since its one message has no key to claim.
func runsTickets(g *idem.Guard, h Handler) (bool, error) {
	noKey := errors.New("probe")
	pg, err := idem.New(g.Store(), idem.Options{Scope: "kafka-probe", Key: func(idem.Message) (string, error) { return "", noKey }})
	if err != nil {
		return false, err
	}
	ts, err := pg.ClaimBatch(context.Background(), []idem.Message{{}})
	if err != nil || len(ts) != 1 {
		return false, fmt.Errorf("kafka: probe the handler for batch claims: %w", err)
	}
	_ = ts[0].Release(context.Background()) // unclaimed: nothing to give back, only spent
	_, _, ok := h.h.RunTicket(context.Background(), ts[0], nil)
	return ok, nil
}

// runAhead runs rec, the head of p, under its ticket when the partition's
// current batch covers it. On the record's first attempt, when no batch
// covers it, it claims a new batch over the queued records from the head on
// (at most MaxClaimBatch) first. A key that repeats an earlier record of
// the batch is claimed by its ticket in its turn; a record whose batch
// claim failed (the error is reported) and a retried record are claimed on
// their own.
func (c *Consumer) runAhead(p *partition, rec *kgo.Record) (idem.Result, error) {
	if len(p.ahead) == 0 && p.attempts == 1 {
		if recs := p.queued(c.opts.MaxClaimBatch); len(recs) > 1 && recs[0] == rec {
			msgs := make([]idem.Message, len(recs))
			for i, r := range recs {
				msgs[i] = MessageOf(r)
			}
			ts, err := c.g.ClaimBatch(p.ctx, msgs)
			if err != nil {
				if p.ctx.Err() == nil {
					c.reportError(fmt.Errorf("kafka: claim batch %s/%d from offset %d: %w", p.topic, p.partition, rec.Offset, err))
				}
			} else {
				for i, t := range ts {
					p.ahead = append(p.ahead, ahead{rec: recs[i], t: t})
				}
			}
		}
	}
	if len(p.ahead) > 0 && p.ahead[0].rec == rec {
		t := p.ahead[0].t
		p.ahead[0] = ahead{}
		p.ahead = p.ahead[1:]
		if res, err, ok := c.h.h.RunTicket(p.ctx, t, rec); ok {
			return res, err
		}
	}
	p.releaseAhead() // a ticket for another record is not this one's: give it back
	return c.h.h.Run(p.ctx, c.g, MessageOf(rec), rec)
}

// releaseAhead gives back the keys claimed ahead but not run, so that a
// retry, the partition's next owner or a restart claims them at once
// instead of after their lease. One StoreTimeout bounds the whole pass: a
// store that is down must not hold a drain or a retry for a timeout per
// claim (what is not released expires with its lease).
func (p *partition) releaseAhead() {
	if len(p.ahead) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), p.c.g.Options().StoreTimeout)
	defer cancel()
	var errs []error
	n := len(p.ahead)
	for _, a := range p.ahead {
		err := a.t.Release(ctx)
		if err != nil && !errors.Is(err, idem.ErrLeaseLost) && !errors.Is(err, idem.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	clear(p.ahead)
	p.ahead = p.ahead[:0]
	if len(errs) > 0 {
		p.c.reportError(fmt.Errorf("kafka: release %d of %d unrun claims of %s/%d: %w", len(errs), n, p.topic, p.partition, errs[0]))
	}
}
