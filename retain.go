package idem

import (
	"context"
	"errors"
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
// Wrappers around a Store forward it (as they forward storekit.BatchStore).
type Retainer interface {
	// Retain moves the ExpiresAt of the completed record req.Key to
	// req.ExpiresAt when that is later, never earlier, in one atomic step,
	// only if the record was completed under req.Token. Stores call
	// storekit.PrepareRetain first (and return its error). With the record r stored
	// for req.Key (if any) and now = req.Now:
	//
	//   - no record, or r expired (r.Expired(now)): ErrNotFound; an
	//     expired record stays expired (a retention that ended is over).
	//   - r not completed, or r.Token != req.Token: ErrLeaseLost,
	//     unchanged (the record belongs to another claim: a later
	//     lifetime, or a claim in progress or released).
	//   - otherwise r.ExpiresAt = the later of r.ExpiresAt and req.ExpiresAt;
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
