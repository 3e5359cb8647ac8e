package broker

import (
	"context"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/idemgo/idem"
)

// DeadLetterHeaders returns the idem headers of a dead letter for the call
// that returned (res, err) on im under g, once the delivery is settled:
// idem.DeadLetterHeaders, with reason as idem.HeaderReason when it is not
// empty (ReasonMaxDeliver), the error as one line cut at a character
// boundary (HeaderText), and the message's fingerprint (by the guard's
// FingerprintFunc) when the call did not report it, so that an operator
// sees it beside the stored record's for every reason, not only conflicts.
//
// The Idem-Stored-* headers say what the store holds now, read under ctx
// (bounded by the guard's StoreTimeout): the record, or
// Idem-Stored-State: none when the key has none (a transactional inbox
// whose transaction rolled back, a key swept since). Where the store cannot
// be read (it is down; a NewInbox guard keeps no records), they describe
// the record as the call left it (idem.Result.Record), and none at all
// when the call left none. The engine builds every dead letter's headers
// with it; transports add their position (sequence, offset).
func DeadLetterHeaders(ctx context.Context, g *idem.Guard, im idem.Message, res idem.Result, err error, reason string) map[string]string {
	h := idem.DeadLetterHeaders(res, err)
	if reason != "" {
		h[idem.HeaderReason] = reason
	}
	if h[idem.HeaderReason] == "" {
		h[idem.HeaderReason] = "permanent"
	}
	if err != nil {
		h[idem.HeaderError] = HeaderText(err.Error())
	}
	if g == nil {
		return h
	}
	if _, ok := h[idem.HeaderFingerprint]; !ok {
		if fp, ferr := g.Fingerprint(im); ferr == nil && fp != "" {
			h[idem.HeaderFingerprint] = fp
		}
	}
	if res.Key.ID != "" {
		storedNow(ctx, g, res, h)
	}
	return h
}

// storedNow sets h's stored-record headers to what g's store holds for
// res.Key.
func storedNow(ctx context.Context, g *idem.Guard, res idem.Result, h map[string]string) {
	sctx, cancel := context.WithTimeout(ctx, g.Options().StoreTimeout)
	rec, err := g.Store().Get(sctx, res.Key)
	cancel()
	switch {
	case err == nil:
		idem.SetStoredHeaders(h, &rec)
	case errors.Is(err, idem.ErrNotFound):
		idem.SetStoredHeaders(h, nil)
	case errors.Is(err, idem.ErrNoRecords) && res.Record.State == "":
		// A NewInbox guard's only record is the business row its marker
		// inserts, and the call left none (the transaction rolled back).
		idem.SetStoredHeaders(h, nil)
	}
}

// MaxHeaderText bounds the error text put in a dead-letter header.
const MaxHeaderText = 1024

// HeaderText makes s safe as a header value: one line (CR and LF become
// spaces), valid UTF-8, at most MaxHeaderText bytes plus an ellipsis when
// cut, never inside a UTF-8 sequence.
func HeaderText(s string) string {
	s = strings.ToValidUTF8(strings.NewReplacer("\r", " ", "\n", " ").Replace(s), "\uFFFD")
	if len(s) <= MaxHeaderText {
		return s
	}
	cut := MaxHeaderText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// DeadLetterHeaderNames are the headers DeadLetterHeaders may set, in the
// order transports that keep an order write them.
var DeadLetterHeaderNames = []string{
	idem.HeaderReason, idem.HeaderError, idem.HeaderDeadLetterKey, idem.HeaderFingerprint,
	idem.HeaderStoredFingerprint, idem.HeaderStoredState, idem.HeaderStoredToken,
	idem.HeaderStoredCreatedAt, idem.HeaderStoredAttempts,
}

// IsDeadLetterHeader reports whether name is one of DeadLetterHeaderNames
// (matched case-insensitively): the headers a replay removes.
func IsDeadLetterHeader(name string) bool {
	for _, h := range DeadLetterHeaderNames {
		if strings.EqualFold(name, h) {
			return true
		}
	}
	return false
}
