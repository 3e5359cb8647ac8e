package postgres

import (
	"time"

	"github.com/idemgo/idem"
)

// rowRecord is one scanned row in recordCols order.
type rowRecord struct {
	scope, id, fingerprint, display string
	state                           int16
	token                           int64
	attempts                        int32
	retaken                         bool
	leaseUntil, expiresAt           time.Time
	createdAt, updatedAt            time.Time
	result                          []byte
}

func (r *rowRecord) dest() []any {
	return []any{&r.scope, &r.id, &r.state, &r.token, &r.attempts, &r.retaken, &r.leaseUntil, &r.expiresAt,
		&r.createdAt, &r.updatedAt, &r.fingerprint, &r.result, &r.display}
}

func (r *rowRecord) record() idem.Record {
	return idem.Record{
		Scope: r.scope, ID: r.id, DisplayID: r.display, State: stateName(r.state),
		Fingerprint: r.fingerprint, Result: r.result, Token: r.token, Attempts: int(r.attempts),
		LeaseUntil: r.leaseUntil, ExpiresAt: r.expiresAt, CreatedAt: r.createdAt, UpdatedAt: r.updatedAt,
	}
}

func stateName(s int16) idem.State {
	switch s {
	case stInProgress:
		return idem.StateInProgress
	case stCompleted:
		return idem.StateCompleted
	case stReleased:
		return idem.StateReleased
	}
	return idem.State("unknown")
}

func stateCode(s idem.State) (int16, bool) {
	switch s {
	case idem.StateInProgress:
		return stInProgress, true
	case idem.StateCompleted:
		return stCompleted, true
	case idem.StateReleased:
		return stReleased, true
	}
	return 0, false
}
