package storekit

import "github.com/idemgo/idem"

// ApplyClaim computes the claim transition of the Store contract on the record
// currently stored for req.Key (nil when absent). It returns the claim to
// report and whether the record must be written back (then claim.Record is the
// new record). Stores that can lock a record (a mutex, SELECT .. FOR UPDATE, a
// WATCH transaction) use it so the rules live in one place; stores that
// claim in one statement or script encode the same rules and run the
// conformance suite to prove it. req is expected to be Prepare'd.
func ApplyClaim(cur *idem.Record, req idem.ClaimRequest) (claim idem.Claim, write bool) {
	now := req.Now
	req.ExpiresAt = Later(req.ExpiresAt, req.LeaseUntil)
	acquire := func(r idem.Record) idem.Claim {
		r.State = idem.StateInProgress
		r.LeaseUntil = req.LeaseUntil
		r.ExpiresAt = req.ExpiresAt
		r.UpdatedAt = now
		return idem.Claim{Outcome: idem.ClaimAcquired, Record: r}
	}
	if cur == nil || cur.Expired(now) {
		// A new lifetime, only over nothing or a settled record whose
		// retention ended (an in-progress record never expires: past its
		// lease it is stale, below). A record that survived keeps counting
		// its tokens; a key without one starts at a fresh random token.
		token := req.NewToken
		if cur != nil {
			token = cur.Token + 1
		} else if token == 0 {
			token = NewToken()
		}
		return acquire(idem.Record{
			Scope: req.Key.Scope, ID: req.Key.StoredID(), DisplayID: req.Key.DisplayID(),
			Fingerprint: req.Fingerprint, Token: token, Attempts: 1, CreatedAt: now,
		}), true
	}
	r := *cur
	switch {
	case r.State == idem.StateReleased:
		// Released means "may be retried", not "content forgotten": the
		// first claim's fingerprint stays until the record expires.
		r.Token++
		r.Attempts++
		if r.Fingerprint == "" {
			r.Fingerprint = req.Fingerprint
		}
		r.Result = nil
		return acquire(r), true
	case r.State == idem.StateCompleted:
		return idem.Claim{Outcome: idem.ClaimDuplicate, Record: r}, false
	case now.Before(r.LeaseUntil):
		return idem.Claim{Outcome: idem.ClaimInProgress, Record: r}, false
	case !req.TakeOverStale:
		// Stale however long ago its lease ended, and past its ExpiresAt
		// too: the Stale policy decides, never a fresh lifetime.
		return idem.Claim{Outcome: idem.ClaimStale, Record: r}, false
	default:
		r.Token++
		r.Attempts++
		c := acquire(r)
		c.Retaken = true
		return c, true
	}
}

// ApplyMark computes the transactional-inbox marker transition (TxStore.Mark)
// on the current record: like ApplyClaim, except that an acquired marker is
// written completed, and stale in-progress records are never taken over.
func ApplyMark(cur *idem.Record, req idem.ClaimRequest) (claim idem.Claim, write bool) {
	req.TakeOverStale = false
	c, write := ApplyClaim(cur, req)
	if c.Outcome == idem.ClaimAcquired {
		c.Record.State = idem.StateCompleted
	}
	return c, write
}
