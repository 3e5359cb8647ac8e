package mysql

import (
	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/sqlrecord"
)

// Records use package sqlrecord's layout: times as BIGINT Unix milliseconds,
// NULL when unset (sqlrecord.MS: no dependence on the DSN's parseTime or loc, no time zone
// conversions, exact round trips of the caller's clock, a plain integer
// index for sweeps) and the columns sqlrecord.Columns, nColumns of them, in
// the order rowArgs uses.
const nColumns = 12

// displayArg returns the display id to store: NULL when the key's
// DisplayID() is its StoredID() (r.DisplayID and r.ID are those two), so the
// common short id is not stored twice (at 100M rows that matters); the
// original id otherwise, for ids StoredID hashes: long ones, and short ones
// spelled like a digest ("sha256:..."), so Record.Key gives the original back.
func displayArg(r idem.Record) any {
	if r.DisplayID == "" || r.DisplayID == r.ID {
		return nil
	}
	return r.DisplayID
}

func resultArg(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

// rowArgs returns r's values in column order.
func rowArgs(r idem.Record) []any {
	return []any{
		r.Scope, r.ID, displayArg(r), string(r.State), r.Fingerprint, resultArg(r.Result),
		r.Token, r.Attempts, sqlrecord.NullMS(r.LeaseUntil), sqlrecord.NullMS(r.ExpiresAt), sqlrecord.NullMS(r.CreatedAt), sqlrecord.NullMS(r.UpdatedAt),
	}
}

// expired is the condition of a record whose retention has ended at the
// time bound to its placeholder (the caller's now), as idem.Record.Expired
// says: a settled record (completed or released) whose expires_at has
// passed. An in-progress record never expires, whatever its expires_at:
// past its lease it is stale, for the Stale policy, and no sweep deletes
// it. A NULL expires_at (unset; rows of older versions that stored 0) never
// expires; every number is a real time, 0 the epoch and negative before it.
const expired = "state <> 'in_progress' AND expires_at <= ?"

// queries are the statements for one table, built once.
type queries struct {
	get, getForUpdate        string
	insertIfAbsent           string // one row; LAST_INSERT_ID says whether it existed
	update                   string // rewrite every mutable column of one locked row
	complete, release, renew string
	owns                     string
	saveResult               string
	sweepVictims             string // the sweep's first step: lock a batch of expired rows, skipping locked ones
	sweepDelete              string // its second: delete them by primary key; Sweep appends the keys
}

func buildQueries(t string) queries {
	const pk = " WHERE scope = ? AND id = ?"
	const fenced = pk + " AND token = ? AND state = 'in_progress'"
	return queries{
		get:          "SELECT " + sqlrecord.Columns + " FROM " + t + pk,
		getForUpdate: "SELECT " + sqlrecord.Columns + " FROM " + t + pk + " FOR UPDATE",
		// On a duplicate the assignment changes nothing but records the
		// existing token with LAST_INSERT_ID(expr), which the server returns
		// as the statement's insert id: 0 means "inserted", whatever the
		// clientFoundRows setting does to the affected-rows count. The
		// duplicate path takes an exclusive lock on the record (never a
		// shared one that two transactions would then both try to upgrade).
		insertIfAbsent: "INSERT INTO " + t + " (" + sqlrecord.Columns + ") VALUES (" + quoteList(nColumns, "?") +
			") ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token)",
		update: "UPDATE " + t + " SET display_id = ?, state = ?, fingerprint = ?, result = ?, token = ?, attempts = ?," +
			" lease_until = ?, expires_at = ?, created_at = ?, updated_at = ?" + pk,
		complete:   "UPDATE " + t + " SET state = 'completed', result = ?, expires_at = ?, updated_at = ?" + fenced,
		release:    "UPDATE " + t + " SET state = 'released', lease_until = ?, updated_at = ?" + fenced,
		renew:      "UPDATE " + t + " SET lease_until = ?, expires_at = GREATEST(expires_at, ?), updated_at = ?" + fenced,
		owns:       "SELECT 1 FROM " + t + fenced,
		saveResult: "UPDATE " + t + " SET result = ?" + pk,
		sweepVictims: "SELECT scope, id FROM " + t + " WHERE " + expired +
			" ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED",
		sweepDelete: "DELETE FROM " + t + " WHERE " + expired + " AND (",
	}
}

// updateArgs returns the arguments of queries.update for r.
func updateArgs(r idem.Record) []any {
	a := rowArgs(r)
	return append(a[2:], r.Scope, r.ID)
}
