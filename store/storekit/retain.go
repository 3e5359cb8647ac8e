package storekit

import (
	"context"
	"fmt"

	"github.com/idemgo/idem"
)

// PrepareRetain checks a retain request before a store takes it: an invalid
// key is a *idem.KeyError, a zero Now or ExpiresAt an *idem.InvalidDataError.
func PrepareRetain(r idem.RetainRequest) (idem.RetainRequest, error) {
	if err := r.Key.Validate(); err != nil {
		return r, err
	}
	switch {
	case r.Now.IsZero():
		return r, invalidRequest("retain", "zero Now")
	case r.ExpiresAt.IsZero():
		return r, invalidRequest("retain", "zero ExpiresAt")
	}
	return r, nil
}

// CheckRetain is the idem.Retainer rule for rec, the record stored for
// req.Key: idem.ErrNotFound when rec has expired at req.Now,
// idem.ErrLeaseLost when rec is not completed under req.Token, nil when
// Retain applies to it.
func CheckRetain(req idem.RetainRequest, rec idem.Record) error {
	switch {
	case rec.Expired(req.Now):
		return idem.ErrNotFound
	case rec.State != idem.StateCompleted || rec.Token != req.Token:
		return idem.ErrLeaseLost
	}
	return nil
}

// ApplyRetain is Retain on cur, the record stored for req.Key (nil: none),
// for stores that decide in Go under their own lock: CheckRetain's error, or
// cur.ExpiresAt moved to req.ExpiresAt when that is later, with write
// reporting whether it moved.
func ApplyRetain(cur *idem.Record, req idem.RetainRequest) (write bool, err error) {
	if cur == nil {
		return false, idem.ErrNotFound
	}
	if err := CheckRetain(req, *cur); err != nil {
		return false, err
	}
	if !cur.ExpiresAt.IsZero() && cur.ExpiresAt.Before(req.ExpiresAt) {
		cur.ExpiresAt = req.ExpiresAt
		return true, nil
	}
	return false, nil
}

// RetainByUpdate is Retain for stores whose retain is one conditional
// update: update raises the record's expiry to req.ExpiresAt (never lowers
// it) only where it is completed under req.Token and not expired at
// req.Now, and reports whether it changed a record; get is the store's Get.
// When the update changed nothing, the record read after it says why:
// absent or expired (idem.ErrNotFound), another claim's (idem.ErrLeaseLost),
// or kept that long already (nil: an update to the same value counts as no
// change on some servers). req's times must be at the store's precision, so
// that the record read back compares as the update did.
func RetainByUpdate(ctx context.Context, req idem.RetainRequest,
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
		if err := CheckRetain(req, rec); err != nil {
			return err
		}
		if rec.ExpiresAt.IsZero() || !rec.ExpiresAt.Before(req.ExpiresAt) {
			return nil
		}
		// Completed under req.Token since the update looked: once more.
	}
	return fmt.Errorf("idem: retain %s: the store's update changed nothing on a record it applies to (times at another precision?)", req.Key)
}
