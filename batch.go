package idem

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"
)

// ErrTicketUsed means a Ticket was run or released already.
var ErrTicketUsed = errors.New("idem: ticket already used")

// Ticket is one message of a batch claimed with Guard.ClaimBatch: run it
// with Do, once, or give it back with Release. A ticket is used by one
// goroutine; a ticket neither run nor released holds its key until its
// lease ends.
type Ticket struct {
	b       *ticketBatch
	key     Key
	fp      string
	corr    string // the message's correlation id (Options.Correlation)
	payload []byte // the message's, kept with Options.KeepPayload
	keyErr  error  // the message had no usable key
	claim   *Claim // the batch's answer, in the store's slice; nil: the key repeats an earlier message of the batch
	used    bool
}

// ticketBatch is what the tickets of a batch share: 128 bytes a ticket,
// where each held it and its whole message in 200.
type ticketBatch struct {
	g    *Guard
	took time.Duration // the batch claim's round trip
	sent time.Time     // when the batch claim was sent: its leases end Lease later
}

// Key returns the message's key (zero ID when it had none).
func (t *Ticket) Key() Key { return t.key }

// ClaimBatch claims the keys of msgs in one round trip when the store is a
// storekit.BatchStore (one statement, one pipeline), for consumers that poll batches.
// It returns one ticket per message, in order; run each with Ticket.Do in
// the message's turn. A key that repeats an earlier message of the batch (a
// producer retry inside one poll) is claimed when its ticket runs, after the
// first has completed, so it is reported as the duplicate it is. A message
// without a usable key gets a ticket that reports it as Do would. The error
// is a store failure for the whole batch (retry it).
//
// Tickets run later than the claim: Do renews the lease first when more than
// a third of it has passed, and reports ErrLeaseLost (retry) when another
// owner took the key over in between.
func (g *Guard) ClaimBatch(ctx context.Context, msgs []Message) ([]*Ticket, error) {
	start := time.Now()
	tickets := make([]*Ticket, len(msgs))
	slab := make([]Ticket, len(msgs)) // one allocation for the batch's tickets
	b := &ticketBatch{g: g}
	sc := getBatchScratch(len(msgs))
	defer putBatchScratch(sc)
	var (
		reqs = sc.reqs
		idx  = sc.idx
		seen = &sc.seen       // the stored ids claimed (every key is in g's scope)
		now  = g.opts.Clock() // one instant for the whole batch
	)
	for i, m := range msgs {
		t := &slab[i]
		t.b, t.corr, t.payload = b, g.opts.Correlation(m), m.Payload
		tickets[i] = t
		t.key, t.keyErr = g.Key(m)
		if t.keyErr == nil {
			t.fp, t.keyErr = g.Fingerprint(m)
		}
		if t.keyErr != nil || seen.add(t.key.StoredID()) {
			continue
		}
		reqs = append(reqs, g.claimRequestAt(t.key, t.fp, now))
		idx = append(idx, i)
	}
	sc.reqs, sc.idx = reqs, idx // for putBatchScratch to clear
	if len(reqs) == 0 {
		return tickets, nil
	}
	// Its keys are distinct (seen): the batch says so, and neither
	// ClaimBatch nor the store looks for a repeat again.
	reqs[0].checked.batch, reqs[0].checked.n = &reqs[0], len(reqs)
	sctx := g.storeCtx(ctx)
	claims, err := ClaimBatch(sctx, g.store, reqs)
	sctx.cancel(nil)
	if errors.Is(err, ErrInvalidData) {
		// One request the store cannot take must not fail its neighbours:
		// unclaimed tickets claim one by one in Do, where only that one
		// meets the (permanent) error.
		return tickets, nil
	}
	if err != nil {
		return nil, storeErr("claim batch", err)
	}
	if len(claims) != len(reqs) {
		return nil, storeErr("claim batch", fmt.Errorf("%d claims for %d requests", len(claims), len(reqs)))
	}
	b.took, b.sent = time.Since(start), start
	for j, i := range idx {
		tickets[i].claim = &claims[j]
	}
	return tickets, nil
}

// Do runs the idempotent flow for the ticket's message from its claim on,
// exactly as Guard.Do would after claiming: duplicates return the recorded
// result, conflicts and in-progress keys their errors, and an acquired key
// runs h under its lease and completes. Pass the pair to Decide.
func (t *Ticket) Do(ctx context.Context, h Handler) (Result, error) {
	if t.used {
		return Result{Key: t.key}, ErrTicketUsed
	}
	t.used = true
	g := t.b.g
	start := time.Now()
	ctx = ContextWithCorrelation(ctx, t.corr)
	if t.keyErr != nil {
		return g.unkeyed(ctx, t.key, t.keyErr, start, h, "two-phase")
	}
	h = g.keepingPayload(t.key, t.fp, t.payload, h) // as Guard.Do keeps it
	if t.claim == nil {
		return g.doKey(ctx, t.key, t.fp, h, start)
	}
	ctx = g.start(ctx, t.key, "two-phase")
	c := t.claim // the ticket's own: its lease is moved on in place
	var err error
	at, sent := start, t.b.sent
	if c.Outcome == ClaimAcquired {
		now := g.clockAt(start)
		if start.Sub(sent) >= g.hb.every || !now.Before(c.Record.LeaseUntil.Add(-2*g.opts.Lease/3)) {
			// The claim has waited for its turn, by the guard's clock or the
			// record's: extend the lease before the handler starts, so the
			// heartbeat's first tick is not too late, and count the lease
			// from this renewal's sending. Bounded by StoreTimeout as the
			// heartbeat's renewals are: a renewal stuck behind a row lock
			// must not stall the batch.
			sent = start
			c.Record.LeaseUntil = now.Add(g.opts.Lease)
			sctx := g.storeCtxAt(ctx, sent)
			err = g.store.Renew(sctx, RenewRequest{Key: t.key, Token: c.Record.Token, Now: now, LeaseUntil: c.Record.LeaseUntil})
			sctx.cancel(nil)
			at = time.Now()
			if err != nil && !errors.Is(err, ErrLeaseLost) {
				g.release(ctx, t.key, c.Record.Token, nil) // let the redelivery claim it at once
			}
		}
	}
	return g.afterClaim(ctx, nil, t.key, t.fp, c, err, start, t.b.took, at, sent, h)
}

// Release gives an acquired, unrun ticket's key back (a consumer shutting
// down or losing its partition), so a redelivery claims it at once rather
// than after the lease. Other tickets have nothing to give back. The
// release runs even when ctx has ended (a shutdown) and is bounded by
// StoreTimeout; a failed one (a *StoreError) leaves the key to its lease.
func (t *Ticket) Release(ctx context.Context) error {
	if t.used {
		return ErrTicketUsed
	}
	t.used = true
	if t.claim != nil && t.claim.Outcome == ClaimAcquired {
		g := t.b.g
		sctx := g.settleCtx(ctx, time.Now())
		defer sctx.cancel(nil)
		if err := g.store.Release(sctx, ReleaseRequest{Key: t.key, Token: t.claim.Record.Token, Now: g.opts.Clock()}); err != nil {
			return storeErr("release", err)
		}
	}
	return nil
}

// idSet is a set of the distinct stored ids of one batch, to find the
// ones that repeat an earlier message's: an open-addressing table of the
// ids themselves, one allocation of two strings' room a message (a map
// of Keys was three times that, and hashed both strings of each).
type idSet struct {
	slots []string // "" is an empty slot: a valid key's id is never empty
	mask  uint64
}

// idSeed hashes the ids of every batch.
var idSeed = maphash.MakeSeed()

// reset makes s a set for up to n ids, in its own room when that is
// enough: s is empty (putBatchScratch cleared it) or new.
func (s *idSet) reset(n int) {
	size := 8
	for size < 2*n {
		size <<= 1
	}
	if cap(s.slots) >= size {
		s.slots = s.slots[:size]
	} else {
		s.slots = make([]string, size)
	}
	s.mask = uint64(size - 1)
}

// batchScratch is what a batch claim needs only until the store answers:
// its requests (about 200 bytes a message), their messages' places and
// the set of its ids. A consumer claims a batch every poll, and these
// were about a quarter of the bytes each message allocated on its way
// through the guard (BenchmarkTicketDo: 1,136 bytes, now 875), and a
// large object to clear for every batch of a few hundred; they are kept
// for the next batch instead. A store does not keep the
// requests once ClaimBatch returns (storekit.BatchStore).
type batchScratch struct {
	reqs []ClaimRequest
	idx  []int
	seen idSet
}

var batchScratchPool sync.Pool

// maxScratch is the largest batch whose scratch is kept: a batch of
// thousands is rare, and its room would be held by the pool in every
// later batch.
const maxScratch = 4096

func getBatchScratch(n int) *batchScratch {
	sc, _ := batchScratchPool.Get().(*batchScratch)
	if sc == nil || cap(sc.reqs) < n {
		sc = &batchScratch{reqs: make([]ClaimRequest, 0, n), idx: make([]int, 0, n)}
	}
	sc.seen.reset(n)
	return sc
}

// putBatchScratch keeps sc for the next batch, its strings cleared so that
// it holds no message's memory.
func putBatchScratch(sc *batchScratch) {
	if cap(sc.reqs) > maxScratch {
		return
	}
	clear(sc.reqs)
	clear(sc.seen.slots)
	sc.reqs, sc.idx = sc.reqs[:0], sc.idx[:0]
	batchScratchPool.Put(sc)
}

// add reports whether id is in the set already, and adds it when not.
func (s *idSet) add(id string) (repeat bool) {
	for i := maphash.String(idSeed, id) & s.mask; ; i = (i + 1) & s.mask {
		switch s.slots[i] {
		case "":
			s.slots[i] = id
			return false
		case id:
			return true
		}
	}
}
