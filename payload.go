package idem

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// PayloadScopeSuffix ends the scope under which a guard with
// Options.KeepPayload keeps its payload copies: the copies of scope
// "billing" are records of scope "billing#payload", apart from the
// consumer's own (idem list and idem stats show them as a scope of their
// own).
const PayloadScopeSuffix = "#payload"

// PayloadKey is the key under which a guard with Options.KeepPayload keeps
// the copy of the content with the given fingerprint (its stored form, as
// Record.Fingerprint holds it) of key: one copy per content, so the copy of
// the content that holds the key (the record's fingerprint) is found beside
// the dead letter of the content that conflicts with it.
func PayloadKey(key Key, fingerprint string) Key {
	return Key{Scope: key.Scope + PayloadScopeSuffix, ID: fingerprint + "/" + key.StoredID()}
}

// KeptPayload returns the copy of the content with the given fingerprint
// of key that a guard with Options.KeepPayload kept in s (cut at
// KeepPayload bytes, truncated reports whether it was), or an error
// wrapping ErrNotFound when none was kept: the guard does not keep
// payloads, the content was first claimed before it did, the copy expired,
// or the key has no fingerprint.
func KeptPayload(ctx context.Context, s Store, key Key, fingerprint string) (payload []byte, truncated bool, err error) {
	if fingerprint == "" {
		return nil, false, fmt.Errorf("%w: %s has no fingerprint, so no payload copy", ErrNotFound, key)
	}
	r, err := s.Get(ctx, PayloadKey(key, fingerprint))
	if err != nil {
		return nil, false, err
	}
	if r.State != StateCompleted || len(r.Result) == 0 {
		return nil, false, fmt.Errorf("%w: the payload copy of %s is %s", ErrNotFound, key, r.State)
	}
	return r.Result[1:], r.Result[0] == payloadCut, nil
}

// The first byte of a kept copy says whether it was cut at KeepPayload.
const (
	payloadWhole byte = 'w'
	payloadCut   byte = 'c'
)

// keepPayload keeps the first KeepPayload bytes of payload, the content
// with fingerprint fp that has just claimed key, under PayloadKey, unless
// a copy of that content is kept already. It costs a claim and a complete
// on the guard's store, once per content of a key; a failure is reported
// to the observer as a step ("keep payload") and never fails the message:
// the copy is for an operator deciding a conflict, not part of the
// record's guarantees.
func (g *Guard) keepPayload(ctx context.Context, key Key, fp string, payload []byte) {
	if g.opts.KeepPayload <= 0 || fp == "" {
		return
	}
	if _, ok := g.store.(noRecords); ok {
		return
	}
	pk := PayloadKey(key, fp)
	if err := pk.Validate(); err != nil {
		g.step(ctx, Step{Key: key, Op: "keep payload", Err: err})
		return
	}
	v := make([]byte, 0, 1+min(len(payload), g.opts.KeepPayload))
	if len(payload) > g.opts.KeepPayload {
		v = append(append(v, payloadCut), payload[:g.opts.KeepPayload]...)
	} else {
		v = append(append(v, payloadWhole), payload...)
	}
	sctx := g.settleCtx(ctx, time.Now())
	defer sctx.cancel(nil)
	now := g.opts.Clock()
	c, err := g.store.Claim(sctx, ClaimRequest{Key: pk, Now: now, LeaseUntil: now.Add(g.opts.Lease),
		ExpiresAt: now.Add(g.opts.Retention), TakeOverStale: true})
	if err == nil && c.Outcome == ClaimAcquired {
		err = g.store.Complete(sctx, CompleteRequest{Key: pk, Token: c.Record.Token, Result: v, Now: now, ExpiresAt: now.Add(g.opts.Retention)})
		if errors.Is(err, ErrInvalidData) {
			// Too large for the store's result column: given back, so that
			// the key is not left in progress.
			g.store.Release(sctx, ReleaseRequest{Key: pk, Token: c.Record.Token, Now: now})
		}
	}
	if err != nil {
		g.step(ctx, Step{Key: key, Op: "keep payload", Err: err})
	}
}

// keepingPayload is h, which keeps the payload copy first when the guard
// keeps payloads (Options.KeepPayload; h itself otherwise): h runs only
// for a claim the call acquired. Guard.Do and Ticket.Do, the two-phase
// calls with a Message, wrap their handlers with it.
func (g *Guard) keepingPayload(key Key, fp string, payload []byte, h Handler) Handler {
	if g.opts.KeepPayload <= 0 {
		return h
	}
	return func(ctx context.Context) ([]byte, error) {
		g.keepPayload(ctx, key, fp, payload)
		return h(ctx)
	}
}
