package sqlite

import (
	"strings"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/sqlrecord"
)

// queries holds the statements with the table name filled in.
type queries struct {
	get, put, mark, saveResult    string
	complete, release, renew      string
	lockNoop, sweep, stats, list0 string
}

// expired is the condition "the record's retention has ended at now" of
// idem.Record.Expired, with now the parameter p: only a settled record
// (completed or released) expires, when its expiry is set (NULL is the
// "never" of rows written before expiries were required; 0 is the epoch)
// and passed. An in-progress record never expires: past its lease it is
// stale, for the Stale policy, and never swept.
func expired(p string) string {
	return "(state <> 'in_progress' AND expires_at <= " + p + ")"
}

func buildQueries(table string) queries {
	r := strings.NewReplacer("{t}", quoteIdent(table), "{cols}", sqlrecord.Columns,
		"{expired1}", expired("?1"), "{expired7}", expired("?7"))
	return queries{
		get: r.Replace(`SELECT {cols} FROM {t} WHERE scope = ? AND id = ?`),
		// put writes a whole record computed by storekit.ApplyClaim inside a write
		// transaction.
		put: r.Replace(`INSERT INTO {t} ({cols}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (scope, id) DO UPDATE SET
				display_id = excluded.display_id, state = excluded.state, fingerprint = excluded.fingerprint,
				result = excluded.result, token = excluded.token, attempts = excluded.attempts,
				lease_until = excluded.lease_until, expires_at = excluded.expires_at,
				created_at = excluded.created_at, updated_at = excluded.updated_at`),
		// mark is the transactional-inbox marker: a conflict-free insert
		// that also takes over released and expired records (the rules of
		// storekit.ApplyMark), and leaves every other record alone. SET
		// expressions read the row's old values. A new row takes the
		// request's random token; a row that survived counts on from its
		// own. An expired row starts a new lifetime (the request's
		// fingerprint and display id, attempts 1); a released one keeps the
		// content it was first claimed with (its fingerprint, unless it has
		// none). It returns the row only when it wrote it. Parameters:
		// scope, id, display_id, fingerprint, lease_until, expires_at, now,
		// new token.
		mark: r.Replace(`INSERT INTO {t} ({cols})
			VALUES (?1, ?2, ?3, 'completed', ?4, NULL, ?8, 1, ?5, ?6, ?7, ?7)
			ON CONFLICT (scope, id) DO UPDATE SET
				state = 'completed',
				fingerprint = CASE WHEN {expired7} OR fingerprint = '' THEN excluded.fingerprint ELSE fingerprint END,
				result = NULL,
				token = token + 1,
				attempts = CASE WHEN {expired7} THEN 1 ELSE attempts + 1 END,
				created_at = CASE WHEN {expired7} THEN ?7 ELSE created_at END,
				display_id = CASE WHEN {expired7} THEN excluded.display_id ELSE display_id END,
				lease_until = excluded.lease_until,
				expires_at = excluded.expires_at,
				updated_at = ?7
			WHERE {expired7} OR state = 'released'
			RETURNING {cols}`),
		saveResult: r.Replace(`UPDATE {t} SET result = ? WHERE scope = ? AND id = ?`),
		complete: r.Replace(`UPDATE {t} SET state = 'completed', result = ?, expires_at = ?, updated_at = ?
			WHERE scope = ? AND id = ? AND token = ? AND state = 'in_progress'`),
		release: r.Replace(`UPDATE {t} SET state = 'released', lease_until = ?, updated_at = ?
			WHERE scope = ? AND id = ? AND token = ? AND state = 'in_progress'`),
		// renew carries the expiry with the lease: expires_at becomes the
		// later of itself and the new lease end (SQLite's two-argument
		// max() of the stored integer milliseconds; a NULL, "never", stays
		// NULL), so an owner that keeps renewing keeps its record past the
		// retention. Parameters:
		// lease_until, now, scope, id, token.
		renew: r.Replace(`UPDATE {t} SET lease_until = ?1, expires_at = max(expires_at, ?1), updated_at = ?2
			WHERE scope = ?3 AND id = ?4 AND token = ?5 AND state = 'in_progress'`),
		// lockNoop writes nothing but makes SQLite take the writer lock, so
		// a deferred transaction behaves like BEGIN IMMEDIATE.
		lockNoop: r.Replace(`UPDATE {t} SET token = token WHERE 0`),
		// The sweep deletes one bounded batch of expired records found
		// through the expires_at index, so it never holds the writer lock for
		// long; in-progress records, live or stale, are never deleted.
		// Parameters: now, limit.
		sweep: r.Replace(`DELETE FROM {t} WHERE rowid IN (
			SELECT rowid FROM {t} WHERE {expired1} LIMIT ?2)`),
		stats: r.Replace(`SELECT scope,
				COALESCE(SUM(state = 'in_progress'), 0),
				COALESCE(SUM(state = 'completed'), 0),
				COALESCE(SUM(state = 'released'), 0),
				COALESCE(SUM(state = 'in_progress' AND lease_until <= ?1), 0),
				COALESCE(SUM({expired1}), 0),
				MIN(CASE WHEN state = 'in_progress' THEN created_at END)
			FROM {t} GROUP BY scope ORDER BY scope`),
		list0: r.Replace(`SELECT {cols} FROM {t}`),
	}
}

func quoteIdent(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

// recordArgs are the put statement's arguments, in column order.
func recordArgs(r idem.Record) []any {
	var result any // NULL for no result
	if r.Result != nil {
		result = r.Result
	}
	return []any{r.Scope, r.ID, r.DisplayID, string(r.State), r.Fingerprint, result, r.Token, r.Attempts,
		sqlrecord.NullMS(r.LeaseUntil), sqlrecord.NullMS(r.ExpiresAt), sqlrecord.NullMS(r.CreatedAt), sqlrecord.NullMS(r.UpdatedAt)}
}

// nullBytes returns b for a BLOB parameter, NULL when b is nil.
func nullBytes(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}
