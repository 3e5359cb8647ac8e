package storekit

import (
	"context"
	"fmt"

	"github.com/idemgo/idem"
)

// PrepareSupersede checks a supersede request before a store takes it and
// returns it as the store must write it, the fingerprint as
// StoredFingerprint keeps it (so that it equals the stored fingerprint of
// a claim with that content): an invalid key is a *idem.KeyError, a zero
// Now or an empty Fingerprint an *idem.InvalidDataError (a record without
// content would take the next claim's, whatever it is: not a decision an
// operator made).
func PrepareSupersede(r idem.SupersedeRequest) (idem.SupersedeRequest, error) {
	if err := r.Key.Validate(); err != nil {
		return r, err
	}
	switch {
	case r.Now.IsZero():
		return r, invalidRequest("supersede", "zero Now")
	case r.Fingerprint == "":
		return r, invalidRequest("supersede", "empty Fingerprint (the content the key is to hold)")
	}
	r.Fingerprint = StoredFingerprint(r.Fingerprint)
	return r, nil
}

// CheckSupersede is the idem.Superseder rule for rec, the record stored for
// req.Key: idem.ErrNotFound when rec has expired at req.Now,
// idem.ErrLeaseLost when rec is in progress (live or stale) or holds
// another token than req.Token, nil when Supersede applies to it.
func CheckSupersede(req idem.SupersedeRequest, rec idem.Record) error {
	switch {
	case rec.Expired(req.Now):
		return idem.ErrNotFound
	case rec.State == idem.StateInProgress || rec.Token != req.Token:
		return idem.ErrLeaseLost
	}
	return nil
}

// ApplySupersede is Supersede on cur, the record stored for req.Key (nil:
// none), for stores that decide in Go under their own lock: CheckSupersede's
// error, or nil with *cur changed as the store must write it back.
func ApplySupersede(cur *idem.Record, req idem.SupersedeRequest) error {
	if cur == nil {
		return idem.ErrNotFound
	}
	if err := CheckSupersede(req, *cur); err != nil {
		return err
	}
	cur.State = idem.StateReleased
	cur.Fingerprint = req.Fingerprint
	cur.Result = nil
	cur.LeaseUntil, cur.UpdatedAt = req.Now, req.Now
	return nil
}

// SupersedeByUpdate is Supersede for stores whose supersede is one
// conditional update: update writes the released record with
// req.Fingerprint only where it is completed or released under req.Token
// and not expired at req.Now, and reports whether it changed a record; get
// is the store's Get. When the update changed nothing, the record read
// after it says why: absent or expired (idem.ErrNotFound), in progress or
// another claim's (idem.ErrLeaseLost), or superseded with that content
// already (nil: an update to the same values counts as no change on some
// servers). req's times must be at the store's precision, so that the
// record read back compares as the update did.
func SupersedeByUpdate(ctx context.Context, req idem.SupersedeRequest,
	update func(ctx context.Context) (bool, error), get func(ctx context.Context, k idem.Key) (idem.Record, error)) error {
	for range 3 {
		changed, err := update(ctx)
		if err != nil || changed {
			return err
		}
		rec, err := get(ctx, req.Key)
		if err != nil {
			return err
		}
		if err := CheckSupersede(req, rec); err != nil {
			return err
		}
		if rec.State == idem.StateReleased && rec.Fingerprint == req.Fingerprint && len(rec.Result) == 0 {
			return nil
		}
		// Completed or released under req.Token since the update looked
		// (a Complete of the claim that held it): once more.
	}
	return fmt.Errorf("idem: supersede %s: the store's update changed nothing on a record it applies to (times at another precision?)", req.Key)
}
