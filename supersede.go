package idem

import (
	"context"
	"errors"
	"time"
)

// Superseder is implemented by stores that let an operator accept another
// content for a key as its new truth: the conflict workflow. A conflict's
// dead letter carries content the key was never processed with; when the
// producer really did correct the message under a reused id, the operator
// supersedes the stored content with the dead letter's fingerprint (idem
// resolve SCOPE KEY --supersede). The record is then released with the new
// fingerprint, so the replayed dead letter is claimed and processed once,
// and the content the key held before is the conflict from then on.
//
// Every store in this module implements it, and storetest checks it.
// Wrappers around a Store forward it (as they forward Retainer).
type Superseder interface {
	// Supersede makes req.Fingerprint the content of the settled record
	// req.Key in one atomic step, only if the record is the one the
	// operator read (req.Token). Stores call storekit.PrepareSupersede
	// first (and return its error: an empty Fingerprint is an
	// *InvalidDataError). With the record r stored for req.Key (if any)
	// and now = req.Now:
	//
	//   - no record, or r expired (r.Expired(now)): ErrNotFound; an
	//     expired record stays as it is (the next claim starts a new
	//     lifetime with its own content anyway).
	//   - r in progress, its lease live or ended (an owner may be running;
	//     the operator resolves it first), or r.Token != req.Token:
	//     ErrLeaseLost, unchanged.
	//   - otherwise (r completed or released under req.Token): State
	//     released, Fingerprint = req.Fingerprint, Result cleared,
	//     LeaseUntil = now (ended), UpdatedAt = now; Token, Attempts,
	//     CreatedAt and ExpiresAt kept. The next claim takes it as any
	//     released record (Token+1), and a store with a native expiry
	//     keeps the record's.
	Supersede(ctx context.Context, req SupersedeRequest) error
}

// SupersedeRequest asks a Superseder to make Fingerprint the content of
// the record Key.
type SupersedeRequest struct {
	Key         Key
	Token       int64     // the token of the record as the operator read it
	Fingerprint string    // the content the key is to hold from now on (a ConflictError's Fingerprint)
	Now         time.Time // the caller's clock
}

// ErrSupersedeUnsupported means a store cannot replace the content of a
// record (it does not implement Superseder). Forward Supersede in the
// store's wrapper, or use a store that has it.
var ErrSupersedeUnsupported = errors.New("idem: the store cannot supersede a record's content (no idem.Superseder)")

// Supersede makes req.Fingerprint the content of the settled record req.Key
// when s is a Superseder (see Superseder.Supersede for the outcomes), and
// returns ErrSupersedeUnsupported otherwise.
func Supersede(ctx context.Context, s Store, req SupersedeRequest) error {
	ss, ok := s.(Superseder)
	if !ok {
		return ErrSupersedeUnsupported
	}
	return ss.Supersede(ctx, req)
}
