package mongoidem

import (
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/idemgo/idem"
)

// idOf is the _id of k's record: the scope, a NUL byte and the stored id.
// Neither holds a NUL (idem.Key.Validate), so the split is unambiguous, and
// NUL sorts before every other byte, so the _id index orders records by
// scope, then id, bytewise: the order List pages in. A string _id is what
// every server finds by its index (FerretDB v1 scans its whole collection
// for an _id that is a document).
func idOf(k idem.Key) string { return recordID(k.Scope, k.StoredID()) }

func recordID(scope, id string) string { return scope + "\x00" + id }

// recordDoc is one record as the collection holds it.
type recordDoc struct {
	ID          string     `bson:"_id"`
	Scope       string     `bson:"scope"`
	KeyID       string     `bson:"id"`                   // the stored id
	DisplayID   string     `bson:"display_id,omitempty"` // only for hashed ids
	State       string     `bson:"state"`
	Fingerprint string     `bson:"fingerprint"`
	Result      []byte     `bson:"result,omitempty"`
	Token       int64      `bson:"token"`
	Attempts    int64      `bson:"attempts"`
	LeaseUntil  time.Time  `bson:"lease_until"`
	ExpiresAt   time.Time  `bson:"expires_at"`
	CreatedAt   time.Time  `bson:"created_at"`
	UpdatedAt   time.Time  `bson:"updated_at"`
	TTLAt       *time.Time `bson:"ttl_at,omitempty"` // server-clock deletion time (TTL index)
	Rev         string     `bson:"rev,omitempty"`    // revision: every write replaces it (turns.go)
	// TTLHold is the ttl_at an in-progress record will take when released:
	// it carries none while in progress (an in-progress record never
	// expires, so the TTL index must not delete it), and Release renames
	// this field to ttl_at.
	TTLHold *time.Time `bson:"ttl_hold,omitempty"`
}

// Field names, for filters and updates.
const (
	fState       = "state"
	fFingerprint = "fingerprint"
	fResult      = "result"
	fToken       = "token"
	fLeaseUntil  = "lease_until"
	fExpiresAt   = "expires_at"
	fCreatedAt   = "created_at"
	fUpdatedAt   = "updated_at"
	fTTLAt       = "ttl_at"
	fTTLHold     = "ttl_hold"
	fScope       = "scope"
)

// docOf is r as stored, with its times at millisecond precision (BSON
// dates), and ttl its server-clock deletion time (nil: none), held in
// ttl_hold rather than ttl_at while r is in progress.
func docOf(r idem.Record, ttl *time.Time) recordDoc {
	d := recordDoc{
		ID:          recordID(r.Scope, r.ID),
		Scope:       r.Scope,
		KeyID:       r.ID,
		State:       string(r.State),
		Fingerprint: r.Fingerprint,
		Result:      r.Result,
		Token:       r.Token,
		Attempts:    int64(r.Attempts),
		LeaseUntil:  ms(r.LeaseUntil),
		ExpiresAt:   ms(r.ExpiresAt),
		CreatedAt:   ms(r.CreatedAt),
		UpdatedAt:   ms(r.UpdatedAt),
		TTLAt:       ttl,
		Rev:         newRev(),
	}
	if r.State == idem.StateInProgress {
		d.TTLAt, d.TTLHold = nil, ttl
	}
	if r.DisplayID != r.ID {
		d.DisplayID = r.DisplayID
	}
	if len(d.Result) == 0 {
		d.Result = nil
	}
	return d
}

// record is the idem.Record d holds. A document that is not a record (a
// state this store never writes) is invalid data.
func (d recordDoc) record() (idem.Record, error) {
	switch idem.State(d.State) {
	case idem.StateInProgress, idem.StateCompleted, idem.StateReleased:
	default:
		return idem.Record{}, &idem.InvalidDataError{Op: "read",
			Err: fmt.Errorf("mongoidem: document %q is not a record (state %q)", d.ID, d.State)}
	}
	if d.ID != recordID(d.Scope, d.KeyID) {
		return idem.Record{}, &idem.InvalidDataError{Op: "read",
			Err: fmt.Errorf("mongoidem: document %q is not a record (scope %q, id %q)", d.ID, d.Scope, d.KeyID)}
	}
	r := idem.Record{
		Scope:       d.Scope,
		ID:          d.KeyID,
		DisplayID:   d.DisplayID,
		State:       idem.State(d.State),
		Fingerprint: d.Fingerprint,
		Token:       d.Token,
		Attempts:    int(d.Attempts),
		LeaseUntil:  d.LeaseUntil,
		ExpiresAt:   d.ExpiresAt,
		CreatedAt:   d.CreatedAt,
		UpdatedAt:   d.UpdatedAt,
	}
	if r.DisplayID == "" {
		r.DisplayID = r.ID
	}
	if len(d.Result) > 0 {
		r.Result = d.Result
	}
	return r, nil
}

// ms is t at the millisecond precision of a BSON date, in UTC.
func ms(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return time.UnixMilli(t.UnixMilli()).UTC()
}

// withMS returns r with its times at millisecond precision, as a read of
// the stored record returns them.
func withMS(r idem.Record) idem.Record {
	r.LeaseUntil, r.ExpiresAt = ms(r.LeaseUntil), ms(r.ExpiresAt)
	r.CreatedAt, r.UpdatedAt = ms(r.CreatedAt), ms(r.UpdatedAt)
	return r
}

// maxYear bounds the times a BSON date (int64 milliseconds from 1970)
// holds exactly: about 292 million years either way.
const maxYear = 290_000_000

// checkTimes refuses times a BSON date cannot hold as an
// *idem.InvalidDataError: the driver would wrap them around silently.
func checkTimes(op string, ts ...time.Time) error {
	for _, t := range ts {
		if y := t.Year(); y > maxYear || y < -maxYear {
			return &idem.InvalidDataError{Op: op, Err: fmt.Errorf("mongoidem: time %v is beyond a BSON date's range", t)}
		}
	}
	return nil
}

// unchanged holds while nothing a claim that read cur decides on has
// changed: the token (every claim changes it), the state (complete and
// release change it), and the lease end and expiry (a renewal moves them
// under the same token).
func unchanged(cur recordDoc) cond {
	return cond{
		filter: bson.D{
			{Key: fToken, Value: cur.Token},
			{Key: fState, Value: cur.State},
			{Key: fLeaseUntil, Value: cur.LeaseUntil},
			{Key: fExpiresAt, Value: cur.ExpiresAt},
		},
		match: func(d recordDoc) bool {
			return d.Token == cur.Token && d.State == cur.State &&
				d.LeaseUntil.Equal(cur.LeaseUntil) && d.ExpiresAt.Equal(cur.ExpiresAt)
		},
	}
}

// heldBy holds while the record is in progress under token.
func heldBy(token int64) cond {
	return cond{
		filter: bson.D{{Key: fToken, Value: token}, {Key: fState, Value: string(idem.StateInProgress)}},
		match:  func(d recordDoc) bool { return d.Token == token && d.State == string(idem.StateInProgress) },
	}
}

// expired holds while the record is expired at now (idem.Record.Expired).
func expired(now time.Time) cond {
	now = ms(now)
	return cond{
		filter: expiredAt(now),
		match: func(d recordDoc) bool {
			return d.State != string(idem.StateInProgress) && !d.ExpiresAt.After(now)
		},
	}
}

// expiredAt is the filter of records expired at now (idem.Record.Expired):
// settled (completed or released) with the retention ended. An in-progress
// record never expires: past its lease it is stale, for the Stale policy,
// and neither Sweep nor the TTL index deletes it.
func expiredAt(now time.Time) bson.D {
	now = ms(now)
	return bson.D{
		{Key: fExpiresAt, Value: bson.D{{Key: "$lte", Value: now}}},
		{Key: fState, Value: bson.D{{Key: "$ne", Value: string(idem.StateInProgress)}}},
	}
}
