package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/idem/internal/claimcheck"
)

// Handler is the user's work for one message. It returns the result to record
// (replayed to duplicates; may be nil). Its context carries the message's key
// (KeyFromContext, DeriveKey) and is cancelled with cause ErrLeaseLost if
// another owner takes the key over, or if its lease is about to end with no
// renewal answered (Options.Lease): it should then return, since another
// owner may start at the lease's end.
type Handler func(ctx context.Context) ([]byte, error)

// Guard runs the idempotent flow around handlers: claim, handle, complete.
// It is safe for concurrent use.
type Guard struct {
	store Store
	inbox any // the TxStore of a NewInbox guard (store is then noRecords)
	opts  Options
	hb    *heartbeat
	// inMemory: the store answers from memory (store/memory), and its
	// calls get no StoreTimeout deadline (claimcheck.InMemory).
	inMemory bool
}

// New returns a guard over store. Options are validated once here; the error
// wraps ErrInvalidOptions and says what to fix.
func New(store Store, opts Options) (*Guard, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil Store", ErrInvalidOptions)
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Guard{store: store, opts: opts, hb: newHeartbeat(opts.Lease),
		inMemory: claimcheck.InMemory != nil && claimcheck.InMemory(store)}, nil
}

// With returns a guard sharing g's store and options with another scope
// and, when key is not nil, another key function. Integrations use it to
// default the scope to the consumer's identity (a consumer group, a durable
// name) and the key to the transport's id.
func (g *Guard) With(scope string, key KeyFunc) (*Guard, error) {
	opts := g.opts
	opts.Scope = scope
	if key != nil {
		opts.Key = key
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts.realClock = g.opts.realClock // the same Clock as g's
	opts.payloadFP = g.opts.payloadFP // and its Fingerprint
	opts.defaultReads = g.opts.defaultReads && key == nil
	return &Guard{store: g.store, inbox: g.inbox, opts: opts, hb: g.hb, inMemory: g.inMemory}, nil
}

// Store returns the guard's store.
func (g *Guard) Store() Store { return g.store }

// Options returns the guard's options with defaults filled in.
func (g *Guard) Options() Options { return g.opts }

// Key extracts and validates the key of m in the guard's scope.
func (g *Guard) Key(m Message) (Key, error) {
	id, err := g.opts.Key(m)
	if err != nil {
		if !errors.Is(err, ErrNoKey) && !errors.Is(err, ErrInvalidKey) {
			err = &KeyError{Reason: err.Error(), Err: ErrInvalidKey}
		}
		return Key{Scope: g.opts.Scope}, err
	}
	// The scope is the guard's, checked by New (or With).
	return Key{Scope: g.opts.Scope, ID: id}, validID(id)
}

// Fingerprint computes the fingerprint of m.
func (g *Guard) Fingerprint(m Message) (string, error) {
	if g.opts.payloadFP {
		// A hex digest: the stored form already.
		return PayloadFingerprint(m)
	}
	fp, err := g.opts.Fingerprint(m)
	fp = storedFingerprint(fp) // raw digest bytes and the like, as stores keep them
	if err != nil && !errors.Is(err, ErrInvalidKey) {
		err = &KeyError{Reason: "fingerprint: " + err.Error(), Err: ErrInvalidKey}
	}
	return fp, err
}

// Do runs h at most once per key (effectively once: see the package doc) in
// two-phase mode. On a duplicate it skips h and returns the recorded result
// with OutcomeDuplicate and a nil error. Errors: ErrNoKey / ErrInvalidKey,
// ErrConflict (*ConflictError), ErrInProgress and ErrStale (*StateError),
// the handler's own error (the claim released), ErrLeaseLost, *StoreError.
// Pass the pair to Decide for the broker action.
func (g *Guard) Do(ctx context.Context, msg Message, h Handler) (Result, error) {
	start := time.Now()
	ctx = g.withCorrelation(ctx, msg)
	key, err := g.Key(msg)
	if nr, ok := g.store.(noRecords); ok {
		// Not even an unkeyed run: a guard without records does no
		// two-phase work at all.
		return g.refuse(ctx, key, nr, start)
	}
	if err == nil {
		var fp string
		if fp, err = g.Fingerprint(msg); err == nil {
			return g.doKey(ctx, key, fp, g.keepingPayload(key, fp, msg.Payload, h), start)
		}
	}
	return g.unkeyed(ctx, key, err, start, h, "two-phase")
}

// unkeyed answers a message whose key could not be extracted (keyErr): with
// MissingKeyProcess and a missing key, h runs without dedup
// (OutcomeUnkeyed); otherwise the message is rejected (OutcomeNoKey).
func (g *Guard) unkeyed(ctx context.Context, key Key, keyErr error, start time.Time, h Handler, mode string) (Result, error) {
	ctx = g.start(ctx, key, mode)
	if !errors.Is(keyErr, ErrNoKey) || g.opts.MissingKey != MissingKeyProcess {
		g.observe(ctx, Event{Key: key, Mode: mode, Outcome: OutcomeNoKey, Err: keyErr, Total: time.Since(start)})
		return Result{Key: key, Outcome: OutcomeNoKey}, keyErr
	}
	hs := time.Now()
	v, err := h(ctx)
	res := Result{Outcome: OutcomeUnkeyed, Key: key, Value: v}
	if outcome, sv, skip := skipOutcome(err); skip {
		res.Outcome, res.Value, err = outcome, sv, nil
	} else if err != nil {
		res.Outcome = failedOutcome(err)
	}
	g.observe(ctx, Event{Key: key, Mode: mode, Outcome: res.Outcome, Err: err, Handler: time.Since(hs), Total: time.Since(start)})
	return res, err
}

// DoKey is Do with a key and fingerprint computed by the caller (HTTP
// middleware, job runners). key.Scope is used as given.
func (g *Guard) DoKey(ctx context.Context, key Key, fingerprint string, h Handler) (Result, error) {
	start := time.Now()
	if err := key.Validate(); err != nil {
		ctx = g.start(ctx, key, "two-phase")
		g.observe(ctx, Event{Key: key, Mode: "two-phase", Outcome: OutcomeNoKey, Err: err, Total: time.Since(start)})
		return Result{Key: key, Outcome: OutcomeNoKey}, err
	}
	return g.doKey(ctx, key, storedFingerprint(fingerprint), h, start)
}

// doKey is DoKey for a key that is valid and a fingerprint in its stored
// form (Guard.Key and Guard.Fingerprint made them), from start, the time
// the call began: Do checks each once and reads the clock once.
func (g *Guard) doKey(ctx context.Context, key Key, fingerprint string, h Handler, start time.Time) (Result, error) {
	ctx = g.start(ctx, key, "two-phase")
	if nr, ok := g.store.(noRecords); ok {
		return g.refuse(ctx, key, nr, start)
	}
	// The run is made before the claim, whose context it holds too: one
	// allocation for the call's contexts, whatever the claim answers.
	r, cc := g.newRun(ctx)
	claimCtx := ctx // a store in memory's (newRun)
	if cc != nil {
		g.bound(cc, ctx, start, false)
		claimCtx = cc
	}
	c, err := g.store.Claim(claimCtx, g.claimRequestAt(key, fingerprint, g.clockAt(start)))
	if cc != nil {
		cc.cancel(nil)
	}
	// The answer's time from the monotonic clock alone: on some machines
	// the wall clock costs as much to read as the claim of a new key in
	// memory, and a store call is too short for the two to part.
	claimed := start.Add(time.Since(start))
	return g.afterClaim(ctx, r, key, fingerprint, &c, err, start, claimed.Sub(start), claimed, start, h)
}

// refuse answers a two-phase call on a guard without records (NewInbox).
func (g *Guard) refuse(ctx context.Context, key Key, nr noRecords, start time.Time) (Result, error) {
	err := nr.err()
	g.observe(ctx, Event{Key: key, Mode: "two-phase", Outcome: OutcomePermanent, Err: err, Total: time.Since(start)})
	return Result{Key: key, Outcome: OutcomePermanent}, err
}

// clockAt is the record time for a step that starts at real, a reading of
// time.Now the guard took anyway: real itself unless Options.Clock is the
// caller's own.
func (g *Guard) clockAt(real time.Time) time.Time {
	if g.opts.realClock {
		return real
	}
	return g.opts.Clock()
}

func (g *Guard) claimRequest(key Key, fingerprint string) ClaimRequest {
	return g.claimRequestAt(key, fingerprint, g.opts.Clock())
}

// claimRequestAt is claimRequest with the clock read by the caller: a batch
// reads it once, so that its requests share their times (stores send shared
// values once).
//
// key is valid and fingerprint in its stored form: every caller checked
// them (Guard.Key and Guard.Fingerprint, or DoKey), and the request says
// so to storekit.PrepareClaim.
func (g *Guard) claimRequestAt(key Key, fingerprint string, now time.Time) ClaimRequest {
	return ClaimRequest{
		checked:       checkedClaim{key: key, fp: fingerprint},
		Key:           key,
		Fingerprint:   fingerprint,
		Now:           now,
		LeaseUntil:    now.Add(g.opts.Lease),
		ExpiresAt:     now.Add(g.opts.Retention),
		TakeOverStale: g.opts.Stale != StalePark,
	}
}

// afterClaim runs the flow from a claim's answer (or its error) on: the
// conflict check, the outcome, the handler under its lease (in r, made
// here when nil), completion.
// The call began at start; the claim's answer was at hand at at, when the
// handler starts (one clock reading for both); the request that set the
// lease (the claim, or a ticket's renewal) was sent at sent.
func (g *Guard) afterClaim(ctx context.Context, r *run, key Key, fingerprint string, c *Claim, claimErr error,
	start time.Time, claimTook time.Duration, at, sent time.Time, h Handler) (res Result, err error) {
	var handled time.Duration // the handler's time, and Reconcile's
	if g.opts.Observer != nil {
		// The event is made only for an observer: it is most of a stack
		// frame to clear.
		defer func() {
			ev := Event{Key: key, Mode: "two-phase", Claim: claimTook, Handler: handled,
				Outcome: res.Outcome, Err: err, Total: time.Since(start), Retaken: res.Retaken}
			if claimErr == nil {
				ev.Token, ev.Attempts = c.Record.Token, c.Record.Attempts
			}
			g.observe(ctx, ev)
		}()
	}
	res.Key = key
	if claimErr != nil {
		res.Outcome = storeOutcome(claimErr)
		return res, storeErr("claim", claimErr)
	}
	res.Record, res.Retaken = c.Record, c.Retaken
	// A record keeps the fingerprint of its first claim through releases
	// and retakes, so every claim compares it with this message's: an
	// acquired claim too (released or retaken records), which is given
	// back at once.
	if conflicting(fingerprint, c.Record.Fingerprint) {
		if c.Outcome == ClaimAcquired {
			g.release(ctx, key, c.Record.Token, &res.Record)
		}
		res.Outcome = OutcomeConflict
		return res, &ConflictError{Key: key, Fingerprint: fingerprint, Record: c.Record}
	}
	switch c.Outcome {
	case ClaimDuplicate:
		res.Outcome, res.Value = OutcomeDuplicate, c.Record.Result
		return res, nil
	case ClaimInProgress:
		res.Outcome = OutcomeInProgress
		return res, &StateError{Key: key, Record: c.Record, Err: ErrInProgress}
	case ClaimStale:
		res.Outcome = OutcomeStale
		return res, &StateError{Key: key, Record: c.Record, Err: ErrStale}
	case ClaimAcquired:
	default:
		res.Outcome = OutcomeStoreError
		return res, storeErr("claim", fmt.Errorf("unknown claim outcome %d", c.Outcome))
	}

	token := c.Record.Token
	if c.Retaken && g.opts.Stale == StaleReconcile {
		hs := time.Now()
		value, done, rerr := g.opts.Reconcile(ContextWithKey(ctx, key), c.Record)
		handled += time.Since(hs)
		if rerr != nil {
			g.release(ctx, key, token, &res.Record)
			res.Outcome = failedOutcome(rerr)
			return res, rerr
		}
		if done {
			res.Outcome = OutcomeReconciled
			at := time.Now()
			return g.complete(ctx, res, token, value, g.settleCtx(ctx, at), at)
		}
	}

	hs := at // the handler starts as the claim answered, or the Reconcile returned
	if c.Retaken && g.opts.Stale == StaleReconcile {
		hs = time.Now()
	}
	if g.hb.tooLate(sent, hs) {
		// The answer (or the Reconcile) came when the lease was within the
		// heartbeat's margin of its end, or past it: a rival's claim may
		// take the key over before a renewal could answer, so the handler
		// does not start. The claim is given back (a rival's, if it took
		// the key already, is safe from this token) and the call reports
		// a lost lease, which Decide retries: the redelivery claims again,
		// and runs the handler if the store answers in time then.
		g.release(ctx, key, token, &res.Record)
		res.Outcome = OutcomeLeaseLost
		return res, &leaseEndError{fmt.Sprintf("the handler would start %v after the claim was sent, too near the end of its %v lease",
			hs.Sub(sent).Round(time.Millisecond), g.opts.Lease)}
	}
	if r == nil {
		r = g.newSettledRun(ctx) // a ticket's: claimed with its batch
	}
	r.token = token
	value, herr, lost := g.runLeased(r, key, h, sent)
	// The handler's end from the monotonic clock alone, as the claim's
	// answer (doKey): the wall clock costs twice as much to read.
	he := hs.Add(time.Since(hs))
	handled += he.Sub(hs)
	outcome, v, skip := skipOutcome(herr)
	switch {
	case lost == nil:
	case lost == errLeaseRanOut && (herr == nil || skip):
		// Told to stop as its lease ran out, the handler finished anyway:
		// its effect is done, so the key is completed if no rival has
		// taken it (fencing decides), rather than given back to run again.
	default:
		if herr == nil {
			herr = lost
		}
		if lost == errLeaseRanOut {
			// The key may still be this call's: give it back at once
			// rather than leave the redelivery to wait out the lease.
			g.release(ctx, key, token, &res.Record)
			if res.Record.State == StateInProgress && res.Record.Token == token {
				// The store took neither the renewals nor the release: it
				// is down or too slow, which is no fault of the message.
				// A store error, so that a broker consumer holds the
				// delivery as for any outage instead of spending one of
				// the broker's; the record decides when the store is back
				// (stale: the Stale policy).
				res.Outcome = OutcomeStoreError
				return res, &StoreError{Op: "renew", Err: fmt.Errorf("%w (handler result: %w)", lost, herr)}
			}
		}
		res.Outcome = OutcomeLeaseLost
		return res, fmt.Errorf("%w (handler result: %w)", lost, herr)
	}
	if skip {
		// The effect is in place already (entity mode, version guards):
		// complete the key so later deliveries stop at the claim.
		res.Outcome = outcome
		return g.complete(ctx, res, token, v, r.settleCtx(he), he)
	}
	if herr != nil {
		g.release(ctx, key, token, &res.Record)
		res.Outcome = failedOutcome(herr)
		return res, herr
	}
	res.Outcome = OutcomeProcessed
	return g.complete(ctx, res, token, value, r.settleCtx(he), he)
}

// complete records value (or nothing, when it is too large: the effects are
// done and must not be repeated, so the key is completed without a result and
// ErrResultTooLarge is reported), under sctx, a settleCtx made at at (nil:
// a store in memory, under context.Background).
func (g *Guard) complete(ctx context.Context, res Result, token int64, value []byte, sctx *callCtx, at time.Time) (Result, error) {
	var tooLarge error
	if g.opts.MaxResultSize < 0 {
		value = nil
	} else if len(value) > g.opts.MaxResultSize {
		tooLarge = fmt.Errorf("%w: %d bytes, limit %d (the key is completed without a result)",
			ErrResultTooLarge, len(value), g.opts.MaxResultSize)
		value = nil
	}
	var sc context.Context = context.Background()
	if sctx != nil {
		defer sctx.cancel(nil)
		sc = sctx
	}
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		now := g.clockAt(at)
		if attempt > 0 {
			now = g.opts.Clock()
		}
		err = g.store.Complete(sc, CompleteRequest{
			Key: res.Key, Token: token, Result: value, Now: now, ExpiresAt: now.Add(g.opts.Retention),
		})
		if errors.Is(err, ErrInvalidData) && value != nil {
			// The store refuses the result (too large for its column, say):
			// the effects are done and must not run again, so the key is
			// completed without it, as with ErrResultTooLarge.
			tooLarge = fmt.Errorf("%w: the store refused it (%v); the key is completed without a result", ErrResultTooLarge, err)
			value = nil
			continue
		}
		if err == nil || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrInvalidData) || sc.Err() != nil {
			break
		}
	}
	if err != nil && errors.Is(err, ErrLeaseLost) {
		// A Complete that committed but whose reply was lost makes the
		// retry find the record completed under this claim's own token:
		// that is this claim's completion, not another owner's.
		gctx := g.settleCtx(ctx, time.Now())
		r, gerr := g.store.Get(gctx, res.Key)
		gctx.cancel(nil)
		if gerr == nil && r.State == StateCompleted && r.Token == token {
			err = nil
		}
	}
	switch {
	case errors.Is(err, ErrLeaseLost):
		res.Outcome = OutcomeLeaseLost
		return res, err
	case errors.Is(err, ErrInvalidData):
		res.Outcome = OutcomePermanent
		return res, err
	case err != nil:
		res.Outcome = OutcomeStoreError
		return res, storeErr("complete", err)
	}
	res.Value = value
	res.Record.State, res.Record.Result = StateCompleted, value
	return res, tooLarge
}

// release gives the claim of key held with token back. When rec is not
// nil (the record as the call read it), it is set to the record as the
// release left it, so that the call's Result.Record says what the store
// holds: released, its lease ended, when the store took the release;
// unchanged (in progress until its lease ends) when it did not.
func (g *Guard) release(ctx context.Context, key Key, token int64, rec *Record) {
	sctx := g.settleCtx(ctx, time.Now())
	defer sctx.cancel(nil)
	// A failed release is harmless: the lease ends and the key is retaken.
	// The observer hears of it.
	now := g.opts.Clock()
	if err := g.store.Release(sctx, ReleaseRequest{Key: key, Token: token, Now: now}); err != nil {
		g.step(ctx, Step{Key: key, Op: "release", Token: token, Err: err})
		return
	}
	if rec != nil && rec.Token == token {
		rec.State, rec.LeaseUntil, rec.UpdatedAt, rec.Result = StateReleased, now, now, nil
	}
}

// withCorrelation puts msg's correlation id in ctx (keeping the caller's
// when the message has none).
func (g *Guard) withCorrelation(ctx context.Context, msg Message) context.Context {
	return ContextWithCorrelation(ctx, g.opts.Correlation(msg))
}

// start tells a StartObserver that a call on key begins and returns the
// context the call runs with.
func (g *Guard) start(ctx context.Context, key Key, mode string) context.Context {
	if so, ok := g.opts.Observer.(StartObserver); ok {
		return so.ObserveStart(ctx, Start{Key: key, Mode: mode, CorrelationID: CorrelationFromContext(ctx)})
	}
	return ctx
}

func (g *Guard) step(ctx context.Context, s Step) {
	if so, ok := g.opts.Observer.(StepObserver); ok {
		s.CorrelationID = CorrelationFromContext(ctx)
		so.ObserveStep(ctx, s)
	}
}

// storeCtx is the context of one store call: ctx bounded by StoreTimeout.
// Every store call the guard makes runs under it (or under settleCtx), so a
// store that stops answering, or a row lock another session holds, costs
// one message StoreTimeout and never stalls the consumer (a partition, a
// slot) for as long as the store hangs. Cancel it with cancel(nil) when the
// call returns.
func (g *Guard) storeCtx(ctx context.Context) *callCtx { return g.storeCtxAt(ctx, time.Now()) }

// storeCtxAt is storeCtx for a call that starts at now, a time the caller
// read anyway: on a fast store the clock is a visible share of the cost.
func (g *Guard) storeCtxAt(ctx context.Context, now time.Time) *callCtx {
	c := new(callCtx)
	g.bound(c, ctx, now, false)
	return c
}

// bound makes c the context of a store call under ctx that starts at now
// (detach: a settling call). c is new, or a field of a new run. A store in
// memory gets no deadline: its calls cannot hang, and the deadline's check
// was a clock reading at each (claimcheck.InMemory).
func (g *Guard) bound(c *callCtx, ctx context.Context, now time.Time, detach bool) {
	c.parent, c.detach = ctx, detach
	if !g.inMemory {
		c.setDeadline(now.Add(g.opts.StoreTimeout))
	}
}

// settleCtx is storeCtx for the calls that settle a claim (complete,
// release, the read after a lost complete reply): they run even when the
// caller's context has ended, so that a finished handler's record is
// written on shutdown and a failed one's key is given back at once.
func (g *Guard) settleCtx(ctx context.Context, now time.Time) *callCtx {
	c := new(callCtx)
	g.bound(c, ctx, now, true)
	return c
}

func (g *Guard) observe(ctx context.Context, e Event) {
	if g.opts.Observer != nil {
		e.CorrelationID = CorrelationFromContext(ctx)
		g.opts.Observer.Observe(ctx, e)
	}
}

func conflicting(msgFP, storedFP string) bool {
	return msgFP != "" && storedFP != "" && msgFP != storedFP
}

func failedOutcome(err error) Outcome {
	if errors.Is(err, ErrConflict) {
		return OutcomeConflict
	}
	if IsPermanent(err) {
		return OutcomePermanent
	}
	return OutcomeFailed
}

// storeOutcome is the outcome of a call whose store step failed with err:
// data the store cannot take is permanent in every mode (two-phase and the
// inbox alike), a stale token is a lost lease, anything else a store
// failure to retry.
func storeOutcome(err error) Outcome {
	switch {
	case errors.Is(err, ErrLeaseLost):
		return OutcomeLeaseLost
	case errors.Is(err, ErrInvalidData):
		return OutcomePermanent
	}
	return OutcomeStoreError
}

// storeErr wraps a store failure as *StoreError unless it is one of idem's
// own sentinels (or a context error the caller caused).
func storeErr(op string, err error) error {
	var se *StoreError
	if errors.As(err, &se) || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalidData) {
		return err
	}
	return &StoreError{Op: op, Err: err}
}
