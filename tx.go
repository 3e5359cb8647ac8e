package idem

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// errSkip rolls back a transaction that has nothing to commit.
var errSkip = errors.New("idem: skip")

// TxHandler is the user's business work inside the inbox transaction.
type TxHandler[Tx any] func(ctx context.Context, tx Tx) ([]byte, error)

// DoTx runs fn in a transaction of the guard's store together with the dedup
// marker (the transactional inbox): commit makes the business writes and the
// marker durable together, or neither. A redelivery after the commit finds the
// marker and is skipped (OutcomeDuplicate with the recorded result); a crash
// before the commit leaves nothing, so the redelivery is processed.
//
// The guard's store must implement TxStore[Tx] (store/sqlite for *sql.Tx,
// store/postgres for pgx.Tx, ...); otherwise DoTx returns ErrNoTx. fn must use
// tx for every write that has to be exactly-once. An error from fn rolls
// everything back and is returned (Permanent errors are dead-lettered by the
// integrations); a result over Options.MaxResultSize, or one the store
// refuses, rolls back too, as an *InvalidDataError (ErrInvalidData and
// ErrResultTooLarge; OutcomePermanent, dead-lettered with reason
// invalid_data), the class every store gives a result it cannot take.
//
// fn normally runs only once the marker is written. A store that defers
// the marker to fn's first statement (a storekit.MarkDeferrer, such as store/postgres
// with Options.MarkWithFirstStatement) starts fn before it knows; for a key
// already recorded that statement fails, nothing commits, and fn's
// transaction runs again the ordinary way. DoTx's outcome and result are
// the same either way.
func DoTx[Tx any](ctx context.Context, g *Guard, msg Message, fn TxHandler[Tx]) (Result, error) {
	start := time.Now()
	ctx = g.withCorrelation(ctx, msg)
	key, err := g.Key(msg)
	var fp string
	if err == nil {
		fp, err = g.Fingerprint(msg)
	}
	ts, txErr := txStore[Tx](g)
	if txErr != nil {
		return Result{Key: key, Outcome: OutcomeStoreError}, txErr
	}
	if err != nil {
		return g.unkeyed(ctx, key, err, start, func(ctx context.Context) ([]byte, error) {
			var v []byte
			err := ts.InTx(ctx, func(ctx context.Context, tx Tx) error {
				var herr error
				v, herr = fn(ctx, tx)
				return herr
			})
			return v, err
		}, "tx")
	}
	res, err := doTx(ctx, g, ts, key, fp, fn)
	if err == nil && res.Outcome == OutcomeProcessed && g.opts.KeepPayload > 0 {
		// After the commit: the store's own writes must not wait on the
		// transaction (SQLite has one writer).
		g.keepPayload(ctx, key, fp, msg.Payload)
	}
	return res, err
}

// DoTxKey is DoTx with a key and fingerprint computed by the caller.
func DoTxKey[Tx any](ctx context.Context, g *Guard, key Key, fingerprint string, fn TxHandler[Tx]) (Result, error) {
	ts, err := txStore[Tx](g)
	if err != nil {
		return Result{Key: key, Outcome: OutcomeStoreError}, err
	}
	return doTx(ctx, g, ts, key, fingerprint, fn)
}

func doTx[Tx any](ctx context.Context, g *Guard, ts TxStore[Tx], key Key, fp string, fn TxHandler[Tx]) (res Result, err error) {
	ev := Event{Key: key, Mode: "tx"}
	start := time.Now()
	ctx = g.start(ctx, key, "tx")
	fp = storedFingerprint(fp)
	defer func() {
		ev.Outcome, ev.Err, ev.Total = res.Outcome, err, time.Since(start)
		g.observe(ctx, ev)
	}()
	res.Key = key
	if err := key.Validate(); err != nil {
		res.Outcome = OutcomeNoKey
		return res, err
	}
	var (
		outcomeErr error // a decision made inside the transaction
		handlerErr error
		marked     bool // the last attempt wrote its marker (the handler ran)
	)
	txErr := ts.InTx(ctx, func(ctx context.Context, tx Tx) error {
		// A store may run fn again (after a deadlock or serialization
		// failure, or a deferred marker that met a recorded key): only the
		// last attempt's decisions count.
		ev.TxRuns++
		handlerErr, marked = nil, false
		res, outcomeErr = markTx(ctx, g, ts, tx, key, fp, &ev, true)
		if outcomeErr != nil {
			return outcomeErr
		}
		if res.Outcome != OutcomeProcessed {
			return errSkip
		}
		marked = true
		hs := time.Now()
		value, herr := fn(ContextWithKey(ctx, key), tx)
		ev.Handler = time.Since(hs)
		if herr != nil {
			handlerErr = herr
			return herr
		}
		if g.opts.MaxResultSize < 0 {
			value = nil
		} else if len(value) > g.opts.MaxResultSize {
			// Invalid data, as when the store refuses the result itself:
			// one class (invalid_data, dead-lettered) whichever limit it
			// met first.
			outcomeErr = &InvalidDataError{Op: "save result", Err: fmt.Errorf("%w: %d bytes, limit %d (the transaction was rolled back)",
				ErrResultTooLarge, len(value), g.opts.MaxResultSize)}
			res.Outcome = OutcomePermanent
			return outcomeErr
		}
		if len(value) > 0 {
			sctx := g.storeCtx(ctx)
			err := ts.SaveResult(sctx, tx, key, value)
			sctx.cancel(nil)
			if errors.Is(err, ErrInvalidData) {
				// The result is all SaveResult carries: a refusal is
				// of the result, ErrResultTooLarge as for the guard's
				// own limit.
				err = fmt.Errorf("%w: %w", ErrResultTooLarge, err)
			}
			if err != nil {
				outcomeErr = storeErr("save result", err)
				res.Outcome = storeOutcome(err)
				return outcomeErr
			}
		}
		res.Value = value
		return nil
	})
	if marked && (handlerErr != nil || outcomeErr != nil || txErr != nil) {
		// The marker rolled back with the transaction: the call leaves no
		// record of its own, and Result.Record must not describe one (a
		// dead letter's stored headers are built from it).
		res.Record = Record{}
	}
	if outcome, v, skip := skipOutcome(handlerErr); skip {
		// The handler found its effect in place (entity mode, version
		// guards): the transaction rolled back, nothing changed; ack.
		res.Outcome, res.Value = outcome, v
		return res, nil
	}
	switch {
	case handlerErr != nil:
		if err := unreachable(ctx, g, ts, handlerErr); err != nil {
			res.Outcome = OutcomeStoreError
			return res, err
		}
		res.Outcome = failedOutcome(handlerErr)
		return res, handlerErr
	case outcomeErr != nil:
		return res, outcomeErr
	case errors.Is(txErr, errSkip):
		return res, nil
	case txErr != nil:
		// The commit (or begin) failed: nothing is durable; retry.
		res.Outcome = OutcomeStoreError
		return res, storeErr("commit", txErr)
	}
	return res, nil
}

// MarkTx writes the dedup marker for msg inside the caller's own transaction
// tx, for callers that manage the transaction themselves. On OutcomeProcessed
// the marker is written: do the business writes in tx and commit. On
// OutcomeDuplicate (nil error) skip the writes: the message was processed
// before. Errors are as for DoTx (ErrConflict, ErrInProgress, ...); after an
// error, roll back.
func MarkTx[Tx any](ctx context.Context, g *Guard, tx Tx, msg Message) (Result, error) {
	ctx = g.withCorrelation(ctx, msg)
	key, err := g.Key(msg)
	if err != nil {
		return Result{Key: key, Outcome: OutcomeNoKey}, err
	}
	fp, err := g.Fingerprint(msg)
	if err != nil {
		return Result{Key: key, Outcome: OutcomeNoKey}, err
	}
	ts, err := txStore[Tx](g)
	if err != nil {
		return Result{Key: key, Outcome: OutcomeStoreError}, err
	}
	ev := Event{Key: key, Mode: "tx"}
	start := time.Now()
	ctx = g.start(ctx, key, "tx")
	res, err := markTx(ctx, g, ts, tx, key, fp, &ev, false)
	ev.Outcome, ev.Err, ev.Total = res.Outcome, err, time.Since(start)
	g.observe(ctx, ev)
	return res, err
}

// markTx marks key in tx. With own (DoTx, whose transaction the store runs
// for idem) a storekit.MarkDeferrer may queue the marker to go with the handler's
// first statement, and the mark is bounded by StoreTimeout like every other
// store call of the guard; MarkTx's caller needs the answer at once, and
// its transaction and context are the caller's own.
func markTx[Tx any](ctx context.Context, g *Guard, ts TxStore[Tx], tx Tx, key Key, fp string, ev *Event, own bool) (Result, error) {
	res := Result{Key: key}
	cs := time.Now()
	req := g.claimRequest(key, fp)
	req.TakeOverStale = false // a marker never takes over a stale two-phase record (TxStore.Mark)
	var (
		c        Claim
		deferred bool
		err      error
	)
	if own {
		sctx := g.storeCtx(ctx)
		defer sctx.cancel(nil)
		ctx = sctx
		if d, ok := ts.(markDeferrer[Tx]); ok {
			c, deferred, err = d.DeferMark(ctx, tx, req)
		}
	}
	if err == nil && !deferred {
		c, err = ts.Mark(ctx, tx, req)
	}
	ev.Claim = time.Since(cs)
	if err != nil {
		res.Outcome = storeOutcome(err)
		return res, storeErr("mark", err)
	}
	res.Record = c.Record
	ev.Token, ev.Attempts = c.Record.Token, c.Record.Attempts
	// Every outcome is compared: a marker over a released record keeps the
	// record's first fingerprint (the transaction then rolls back).
	if conflicting(fp, c.Record.Fingerprint) {
		res.Outcome = OutcomeConflict
		return res, &ConflictError{Key: key, Fingerprint: fp, Record: c.Record}
	}
	switch c.Outcome {
	case ClaimAcquired:
		res.Outcome = OutcomeProcessed
		return res, nil
	case ClaimDuplicate:
		res.Outcome, res.Value = OutcomeDuplicate, c.Record.Result
		return res, nil
	case ClaimStale:
		res.Outcome = OutcomeStale
		return res, &StateError{Key: key, Record: c.Record, Err: ErrStale}
	default:
		res.Outcome = OutcomeInProgress
		return res, &StateError{Key: key, Record: c.Record, Err: ErrInProgress}
	}
}

// CheckTx reports whether DoTx can run Tx transactions under g: nil when g's
// store (or the TxStore of a NewInbox guard) implements TxStore[Tx], else an
// error wrapping ErrNoTx that names both types. Integrations call it at
// construction so a mismatch fails there, not on every message.
func CheckTx[Tx any](g *Guard) error {
	_, err := txStore[Tx](g)
	return err
}

// txStore returns the guard's store as a transactional inbox over Tx, or an
// error wrapping ErrNoTx that names both types.
func txStore[Tx any](g *Guard) (TxStore[Tx], error) {
	var (
		ts TxStore[Tx]
		ok bool
	)
	if g.inbox != nil {
		ts, ok = g.inbox.(TxStore[Tx])
	} else {
		ts, ok = g.store.(TxStore[Tx])
	}
	if !ok {
		var zero Tx
		var store any = g.store
		if g.inbox != nil {
			store = g.inbox
		}
		return nil, fmt.Errorf("%w: %T has none for %T", ErrNoTx, store, zero)
	}
	return ts, nil
}

// pinger is storekit.Pinger: a store that can say whether its server
// answers.
type pinger interface {
	Ping(ctx context.Context) error
}

// unreachable tells a handler that failed because the store went away (its
// statements ran on the store's connection, in the store's transaction:
// a server restarted mid-transaction fails them) from one that failed on
// its own: when the store is a pinger and does not answer now, the failure
// is the store's, a *StoreError wrapping the handler's error, and the
// caller holds the message as for any store outage instead of counting a
// failed delivery. A handler error that is permanent stays the handler's.
func unreachable[Tx any](ctx context.Context, g *Guard, ts TxStore[Tx], herr error) error {
	p, ok := ts.(pinger)
	if !ok || IsPermanent(herr) || ctx.Err() != nil {
		return nil
	}
	sctx := g.storeCtx(ctx)
	perr := p.Ping(sctx)
	sctx.cancel(nil)
	if perr == nil {
		return nil
	}
	return &StoreError{Op: "tx", Err: fmt.Errorf("%w (the store does not answer: %v)", herr, perr)}
}
