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

func buildQueries(table string) queries {
	r := strings.NewReplacer("{t}", quoteIdent(table), "{cols}", sqlrecord.Columns)
	return queries{
		get: r.Replace(`SELECT {cols} FROM {t} WHERE scope = ? AND id = ?`),
		// put writes a whole record computed by idem.ApplyClaim inside a write
		// transaction.
		put: r.Replace(`INSERT INTO {t} ({cols}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (scope, id) DO UPDATE SET
				display_id = excluded.display_id, state = excluded.state, fingerprint = excluded.fingerprint,
				result = excluded.result, token = excluded.token, attempts = excluded.attempts,
				lease_until = excluded.lease_until, expires_at = excluded.expires_at,
				created_at = excluded.created_at, updated_at = excluded.updated_at`),
		// mark is the transactional-inbox marker: a conflict-free insert
		// that also takes over released and expired records (the rules of
		// idem.ApplyMark), and leaves every other record alone. SET
		// expressions read the row's old values. It returns the row only when
		// it wrote it. Parameters: scope, id, display_id, fingerprint,
		// lease_until, expires_at, now.
		mark: r.Replace(`INSERT INTO {t} ({cols})
			VALUES (?1, ?2, ?3, 'completed', ?4, NULL, 1, 1, ?5, ?6, ?7, ?7)
			ON CONFLICT (scope, id) DO UPDATE SET
				state = 'completed',
				fingerprint = excluded.fingerprint,
				result = NULL,
				token = token + 1,
				attempts = CASE WHEN expires_at <> 0 AND expires_at <= ?7 THEN 1 ELSE attempts + 1 END,
				created_at = CASE WHEN expires_at <> 0 AND expires_at <= ?7 THEN ?7 ELSE created_at END,
				display_id = excluded.display_id,
				lease_until = excluded.lease_until,
				expires_at = excluded.expires_at,
				updated_at = ?7
			WHERE (expires_at <> 0 AND expires_at <= ?7) OR state = 'released'
			RETURNING {cols}`),
		saveResult: r.Replace(`UPDATE {t} SET result = ? WHERE scope = ? AND id = ?`),
		complete: r.Replace(`UPDATE {t} SET state = 'completed', result = ?, expires_at = ?, updated_at = ?
			WHERE scope = ? AND id = ? AND token = ? AND state = 'in_progress'`),
		release: r.Replace(`UPDATE {t} SET state = 'released', lease_until = ?, updated_at = ?
			WHERE scope = ? AND id = ? AND token = ? AND state = 'in_progress'`),
		renew: r.Replace(`UPDATE {t} SET lease_until = ?, updated_at = ?
			WHERE scope = ? AND id = ? AND token = ? AND state = 'in_progress'`),
		// lockNoop writes nothing but makes SQLite take the writer lock, so
		// a deferred transaction behaves like BEGIN IMMEDIATE.
		lockNoop: r.Replace(`UPDATE {t} SET token = token WHERE 0`),
		// The sweep deletes one bounded batch found through the expires_at
		// index, so it never holds the writer lock for long.
		sweep: r.Replace(`DELETE FROM {t} WHERE rowid IN (
			SELECT rowid FROM {t} WHERE expires_at <> 0 AND expires_at <= ? LIMIT ?)`),
		stats: r.Replace(`SELECT scope,
				COALESCE(SUM(state = 'in_progress'), 0),
				COALESCE(SUM(state = 'completed'), 0),
				COALESCE(SUM(state = 'released'), 0),
				COALESCE(SUM(state = 'in_progress' AND lease_until <= ?1), 0),
				COALESCE(SUM(expires_at <> 0 AND expires_at <= ?1), 0),
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
		sqlrecord.MS(r.LeaseUntil), sqlrecord.MS(r.ExpiresAt), sqlrecord.MS(r.CreatedAt), sqlrecord.MS(r.UpdatedAt)}
}

// nullBytes returns b for a BLOB parameter, NULL when b is nil.
func nullBytes(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}
