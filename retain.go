package idem

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Retainer is implemented by stores that can keep a completed record past
// the retention it was completed with. A record that is part of something
// still running needs it: a job's finished step must outlive the run that
// holds its window, however long that run lasts (package job retains its
// steps on every renewal of the run), or a retake after a crash would find
// the step's record expired and do its effect again.
//
// Every store in this module implements it, and storetest checks it.
// Wrappers around a Store forward it (as they forward BatchStore).
type Retainer interface {
	// Retain moves the ExpiresAt of the completed record req.Key to
	// req.ExpiresAt when that is later, never earlier, in one atomic step,
	// only if the record was completed under req.Token. Stores call
	// req.Prepare first (and return its error). With the record r stored
	// for req.Key (if any) and now = req.Now:
	//
	//   - no record, or r expired (r.Expired(now)): ErrNotFound; an
	//     expired record stays expired (a retention that ended is over).
	//   - r not completed, or r.Token != req.Token: ErrLeaseLost,
	//     unchanged (the record belongs to another claim: a later
	//     lifetime, or a claim in progress or released).
	//   - otherwise r.ExpiresAt = Later(r.ExpiresAt, req.ExpiresAt);
	//     nothing else changes. A store with a native expiry sets it to
	//     the duration from req.Now to the new ExpiresAt.
	Retain(ctx context.Context, req RetainRequest) error
}

// RetainRequest asks a Retainer to keep a completed record at least until
// ExpiresAt.
type RetainRequest struct {
	Key       Key
	Token     int64 // the token the record was completed under
	Now       time.Time
	ExpiresAt time.Time // the new retention end, if later than the record's
}

// Prepare checks a retain request before a store takes it: an invalid key
// is a *KeyError, a zero Now or ExpiresAt an *InvalidDataError.
func (r RetainRequest) Prepare() (RetainRequest, error) {
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

// Check is the Retainer rule for rec, the record stored for r.Key:
// ErrNotFound when rec has expired at r.Now, ErrLeaseLost when rec is not
// completed under r.Token, nil when Retain applies to it.
func (r RetainRequest) Check(rec Record) error {
	switch {
	case rec.Expired(r.Now):
		return ErrNotFound
	case rec.State != StateCompleted || rec.Token != r.Token:
		return ErrLeaseLost
	}
	return nil
}

// ApplyRetain is Retain on cur, the record stored for req.Key (nil: none),
// for stores that decide in Go under their own lock: Check's error, or
// cur.ExpiresAt moved to req.ExpiresAt when that is later, with write
// reporting whether it moved.
func ApplyRetain(cur *Record, req RetainRequest) (write bool, err error) {
	if cur == nil {
		return false, ErrNotFound
	}
	if err := req.Check(*cur); err != nil {
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
// absent or expired (ErrNotFound), another claim's (ErrLeaseLost), or kept
// that long already (nil: an update to the same value counts as no change
// on some servers). req's times must be at the store's precision, so that
// the record read back compares as the update did.
func RetainByUpdate(ctx context.Context, req RetainRequest,
	update func(ctx context.Context) (bool, error), get func(ctx context.Context, k Key) (Record, error)) error {
	for range 3 {
		changed, err := update(ctx)
		if err != nil || changed {
			return err
		}
		rec, err := get(ctx, req.Key)
		if err != nil {
			return err
		}
		if err := req.Check(rec); err != nil {
			return err
		}
		if rec.ExpiresAt.IsZero() || !rec.ExpiresAt.Before(req.ExpiresAt) {
			return nil
		}
		// Completed under req.Token since the update looked: once more.
	}
	return fmt.Errorf("idem: retain %s: the store's update changed nothing on a record it applies to (times at another precision?)", req.Key)
}

// ErrRetainUnsupported means a store cannot keep a completed record past
// its retention (it does not implement Retainer), where the caller needs
// it to: package job's steps, whose records must live as long as their
// run. Forward Retain in the store's wrapper, or use a store that has it.
var ErrRetainUnsupported = errors.New("idem: the store cannot retain completed records (no idem.Retainer)")

// Retain keeps the completed record req.Key until at least req.ExpiresAt
// when s is a Retainer (see Retainer.Retain for the outcomes), and returns
// ErrRetainUnsupported otherwise.
func Retain(ctx context.Context, s Store, req RetainRequest) error {
	rs, ok := s.(Retainer)
	if !ok {
		return ErrRetainUnsupported
	}
	return rs.Retain(ctx, req)
}
