package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
)

// Batch claims. With a store that claims many keys in one round trip (an
// idem.BatchStore) and a two-phase handler, a partition claims its queued
// records together, from the head on, and each record then runs under the
// claim made for it: one round trip per batch instead of one per record.
//
// The handler is sealed (a Handler runs itself under a guard), so the
// claims made ahead reach it through the store: the consumer runs two-phase
// handlers under a guard over aheadStore, the guard's own store whose Claim
// answers with the claim made ahead for the key, when the partition's
// context carries one, instead of a round trip. A transactional handler
// cannot run there (aheadStore has no transactions), so NewConsumer keeps
// the guard as given for it: the transactional inbox marks a key inside the
// record's own transaction, which cannot be taken ahead.

// claimsAhead returns the guard that runs h over claims made ahead, or nil
// when records are claimed one by one: the store has no batch claims,
// maxBatch is 1, or h is transactional.
func claimsAhead(g *idem.Guard, h Handler, maxBatch int) (*idem.Guard, error) {
	bs, ok := g.Store().(idem.BatchStore)
	if !ok || maxBatch <= 1 {
		return nil, nil
	}
	opts := g.Options()
	ag, err := idem.New(&aheadStore{Store: g.Store(), bs: bs, lease: opts.Lease}, opts)
	if err != nil {
		return nil, err
	}
	if h.Check(ag) != nil {
		return nil, nil // a HandleTx handler: it claims in its own transaction
	}
	return ag, nil
}

// aheadStore is a guard's store whose claims may have been made ahead, in
// one batch, for the records queued behind a partition's head.
type aheadStore struct {
	idem.Store
	bs    idem.BatchStore
	lease time.Duration
}

// aheadClaims are the claims a partition made in its current batch and has
// not run yet, by key. Only the partition's worker goroutine uses them.
type aheadClaims map[idem.Key]idem.Claim

type aheadKey struct{}

func claimsFrom(ctx context.Context) aheadClaims {
	cs, _ := ctx.Value(aheadKey{}).(aheadClaims)
	return cs
}

// ClaimBatch claims reqs in one round trip and keeps the claims in the
// partition's aheadClaims, for the records' turns.
func (s *aheadStore) ClaimBatch(ctx context.Context, reqs []idem.ClaimRequest) ([]idem.Claim, error) {
	claims, err := s.bs.ClaimBatch(ctx, reqs)
	if cs := claimsFrom(ctx); err == nil && cs != nil && len(claims) == len(reqs) {
		for i, c := range claims {
			cs[reqs[i].Key] = c
		}
	}
	return claims, err
}

// Claim answers with the claim made ahead for req.Key, once, and claims
// in one round trip otherwise. A claim made ahead has waited for its turn:
// as idem.Ticket.Do does, its lease is renewed first when more than a third
// of it has passed, so that the heartbeat's first tick is not too late; if
// another owner took the key over meanwhile, the key is claimed afresh.
func (s *aheadStore) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	cs := claimsFrom(ctx)
	c, ok := cs[req.Key]
	if !ok {
		return s.Store.Claim(ctx, req)
	}
	delete(cs, req.Key)
	if c.Outcome != idem.ClaimAcquired || req.Now.Before(c.Record.LeaseUntil.Add(-2*s.lease/3)) {
		return c, nil
	}
	err := s.Store.Renew(ctx, idem.RenewRequest{Key: req.Key, Token: c.Record.Token, Now: req.Now, LeaseUntil: req.LeaseUntil})
	switch {
	case err == nil:
		c.Record.LeaseUntil = req.LeaseUntil
		return c, nil
	case errors.Is(err, idem.ErrLeaseLost):
		return s.Store.Claim(ctx, req)
	default:
		_ = s.Store.Release(ctx, idem.ReleaseRequest{Key: req.Key, Token: c.Record.Token, Now: req.Now}) // let the redelivery claim it at once
		return idem.Claim{}, err
	}
}

// runAhead runs rec, the head of p, under the ahead guard. On the record's
// first attempt, when no batch covers it, it claims a new batch over the
// queued records from the head on (at most MaxClaimBatch) first. A key that
// repeats an earlier record of the batch, a record whose batch claim failed
// (the error is reported) and a retried record are claimed in their turn.
func (c *Consumer) runAhead(p *partition, rec *kgo.Record) (idem.Result, error) {
	covered := p.batched > 0
	if covered {
		p.batched--
	} else if p.attempts == 1 {
		p.releaseAhead() // nothing is expected here: give back whatever is
		if recs := p.queued(c.opts.MaxClaimBatch); len(recs) > 1 && recs[0] == rec {
			msgs := make([]idem.Message, len(recs))
			for i, r := range recs {
				msgs[i] = MessageOf(r)
			}
			if _, err := c.ahead.ClaimBatch(p.actx, msgs); err != nil {
				if p.ctx.Err() == nil {
					c.reportError(fmt.Errorf("kafka: claim batch %s/%d from offset %d: %w", p.topic, p.partition, rec.Offset, err))
				}
			} else {
				p.batched = len(recs) - 1
			}
		}
	}
	return c.h.Run(p.actx, c.ahead, MessageOf(rec), rec)
}

// releaseAhead gives back the keys claimed ahead but not run, so that a
// retry, the partition's next owner or a restart claims them at once
// instead of after their lease. One StoreTimeout bounds the whole pass: a
// store that is down must not hold a drain or a retry for a timeout per
// claim (what is not released expires with its lease).
func (p *partition) releaseAhead() {
	p.batched = 0
	if len(p.claims) == 0 {
		return
	}
	st := p.c.g.Store()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), p.c.g.Options().StoreTimeout)
	defer cancel()
	var errs []error
	n := len(p.claims)
	for k, cl := range p.claims {
		delete(p.claims, k)
		if cl.Outcome != idem.ClaimAcquired {
			continue
		}
		err := st.Release(ctx, idem.ReleaseRequest{Key: k, Token: cl.Record.Token, Now: p.c.clock()})
		if err != nil && !errors.Is(err, idem.ErrLeaseLost) && !errors.Is(err, idem.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		p.c.reportError(fmt.Errorf("kafka: release %d of %d unrun claims of %s/%d: %w", len(errs), n, p.topic, p.partition, errs[0]))
	}
}
