package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/store/storekit"
)

// Batch claims. With a store that claims many keys in one round trip (an
// storekit.BatchStore) and a two-phase handler, a partition claims its queued
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
	im  idem.Message // c.message(rec), which the claim was made with
}

// claimsAhead reports whether the consumer claims in batches: the store
// has batch claims, maxBatch allows more than one record, and h runs under
// tickets (a Handle handler; not HandleTx, nor HandleCheckpoint, whose
// transactions hold no claims).
func claimsAhead(g *idem.Guard, h Handler, maxBatch int) (bool, error) {
	if _, ok := g.Store().(storekit.BatchStore); !ok || maxBatch <= 1 || h.cp != nil {
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
	_, _, ok := h.engine().RunTicket(context.Background(), ts[0], nil)
	return ok, nil
}

// runAhead runs rec's handler under the ticket claimed for it in its
// partition's batch. At the head of a fresh record (its first try) with
// others queued behind it, it claims the head and up to MaxClaimBatch-1
// queued records in one round trip; the tickets then run one by one in
// offset order. A record without a ticket (a retry, a failed batch claim)
// is claimed on its own, and tickets that no longer match the head are
// given back.
func (c *Consumer) runAhead(ctx context.Context, p *partition, h broker.Handler[*kgo.Record], rec *kgo.Record, im idem.Message) (idem.Result, error) {
	if len(p.ahead) == 0 && p.attempts == 1 {
		if recs := p.queued(c.opts.MaxClaimBatch); len(recs) > 1 && recs[0] == rec {
			msgs := append(p.msgsBuf[:0], make([]idem.Message, len(recs))...)
			p.msgsBuf = msgs // kept for the next batch: the tickets hold copies
			msgs[0] = im
			for i, r := range recs[1:] {
				msgs[i+1] = c.message(r)
			}
			ts, err := c.g.ClaimBatch(ctx, msgs)
			if err != nil {
				if ctx.Err() == nil {
					c.reportError(fmt.Errorf("kafka: claim batch %s/%d from offset %d: %w", p.topic, p.partition, rec.Offset, err))
				}
			} else {
				p.ahead = p.aheadBuf[:0]
				for i, t := range ts {
					p.ahead = append(p.ahead, ahead{rec: recs[i], t: t, im: msgs[i]})
				}
				p.aheadBuf = p.ahead
			}
			clear(msgs) // not to hold the batch's records in memory past their tickets
		}
	}
	if len(p.ahead) > 0 && p.ahead[0].rec == rec {
		t := p.ahead[0].t
		p.ahead[0] = ahead{}
		p.ahead = p.ahead[1:]
		if res, err, ok := h.RunTicket(ctx, t, rec); ok {
			return res, err
		}
	}
	p.releaseAhead() // a ticket for another record is not this one's: give it back
	return h.Run(ctx, c.g, im, rec)
}

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
