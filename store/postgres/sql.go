package postgres

import (
	"fmt"
	"strings"
	"time"
)

// States as stored (smallint: 2 bytes a row instead of a dozen for the name).
const (
	stInProgress = 1
	stCompleted  = 2
	stReleased   = 3
)

// recordCols are the columns every statement returning records reads, in
// the order rowRecord.dest expects.
var recordCols = columns("")

// statements holds the SQL of one table, built once in New.
type statements struct {
	claim, mark           string // one key: $1 scope .. $8 sweep_at, $9 new token, $10 take over stale
	markNew               string // Mark's fast path: the insert alone, $1 .. $9, no RETURNING
	markNewOrGet          string // DeferMark's: markNew, or the existing record (see buildStatements)
	claimBatchNew         string // ClaimBatch's fast path: the insert alone over the arrays
	markBatchNew          string // MarkBatch's fast path, the arrays of claimBatch
	claimBatchNewShared   string // claimBatchNew for a batch that shares its scope and times
	markBatchNewShared    string // markBatchNew for a batch that shares its scope and times
	claimBatchPlain       string // claimBatchNew without ON CONFLICT or RETURNING (ClaimBatch alone)
	claimBatchPlainShared string // claimBatchNewShared without ON CONFLICT or RETURNING
	claimBatch, markBatch string // the same as unnested arrays
	complete, release     string
	renew, saveResult     string
	get, sweep, stats     string
	list                  string // WHERE and LIMIT appended by List
}

// sweepSlackSQL is sweepSlack as an SQL interval.
var sweepSlackSQL = fmt.Sprintf(`interval '%d seconds'`, int(sweepSlack/time.Second))

// keepSweepAt is the sweep_at an update writes for a row t whose retention
// now ends at the time whose sweepAt is s: the row's own sweep_at while it
// is at most s (so at most expires_at) and not more than sweepSlack below
// it, else s. The usual complete, a handler's duration after its claim,
// keeps the indexed value and stays HOT.
func keepSweepAt(t, s string) string {
	return fmt.Sprintf(`CASE WHEN %[2]s < %[1]ssweep_at OR %[2]s > %[1]ssweep_at + %[3]s THEN %[2]s ELSE %[1]ssweep_at END`,
		t, s, sweepSlackSQL)
}

// expired is the Store contract's "r expired" in SQL for a row t at now: a
// settled row (completed or released) whose retention ended. An in-progress
// row never expires, whatever its expires_at: past its lease it is stale,
// for the Stale policy (acquirable below only with take_over), and no sweep
// deletes it.
func expired(t, now string) string {
	return fmt.Sprintf(`(%[1]sstate <> %[3]d AND %[1]sexpires_at <= %[2]s)`, t, now, stInProgress)
}

// acquire is the acquire rule of the Store contract (storekit.ApplyClaim) as an
// UPDATE of an existing row t with the request's values (r: now, scope, ...,
// take_over): the row is taken when its retention ended, it was released, or
// (with take_over) its lease ended. Otherwise the UPDATE matches nothing and
// the row is neither written nor locked.
func acquire(table, from string, state int, r func(string) string, match string) string {
	return `UPDATE ` + table + ` AS t SET ` + acquireSet(state, r) + `
	` + from + `
	WHERE ` + match + `
		AND ` + acquirable(r) + `
	RETURNING ` + columns("t.")
}

// acquirable is acquire's condition on the row t.
func acquirable(r func(string) string) string {
	return fmt.Sprintf(`(%[1]s OR t.state = %[2]d OR (t.state = %[3]d AND t.lease_until <= %[4]s AND %[5]s))`,
		expired("t.", r("now")), stReleased, stInProgress, r("now"), r("take_over"))
}

// acquireSet is acquire's assignments to the row t. A row that still exists
// keeps counting its tokens (token + 1), and keeps its fingerprint unless its
// retention ended (a new lifetime) or it was released without one: release
// means "may be retried", not "content forgotten".
func acquireSet(state int, r func(string) string) string {
	return fmt.Sprintf(`
		state       = %[1]d,
		token       = t.token + 1,
		attempts    = CASE WHEN %[2]s THEN 1 ELSE t.attempts + 1 END,
		fingerprint = CASE WHEN %[2]s OR (t.state = %[3]d AND t.fingerprint = '') THEN %[4]s ELSE t.fingerprint END,
		display_id  = CASE WHEN %[2]s THEN NULLIF(%[5]s, '') ELSE t.display_id END,
		created_at  = CASE WHEN %[2]s THEN %[6]s ELSE t.created_at END,
		retaken     = NOT (%[2]s OR t.state = %[3]d),
		result      = NULL,
		lease_until = %[7]s,
		expires_at  = %[8]s,
		sweep_at    = %[9]s,
		updated_at  = %[6]s`,
		state, expired("t.", r("now")), stReleased, r("fingerprint"), r("display_id"), r("now"),
		r("lease_until"), r("expires_at"), keepSweepAt("t.", r("sweep_at")))
}

const insertCols = `(scope, id, display_id, state, fingerprint, token, attempts, lease_until, expires_at, sweep_at, created_at, updated_at)`

func buildStatements(table string) statements {
	var s statements
	// One key, one statement with three branches: the insert of a new row
	// (ON CONFLICT DO NOTHING waits for a concurrent inserter of the key and
	// never raises a unique violation), the update taking an existing
	// acquirable row, and otherwise a plain read of the existing row. A
	// duplicate thus costs a read: no row lock, no WAL. All three use the
	// statement's snapshot, so a row committed by a concurrent claim after
	// that snapshot can be missing from all three: the caller runs the
	// statement again (see claimOne). A new row takes the request's token
	// ($9, idem.ClaimRequest.NewToken: random, so that a key whose record
	// was deleted never starts over at a token a zombie holds); an existing
	// one counts on from its own.
	single := func(state int) string {
		params := map[string]string{"scope": "$1", "id": "$2", "display_id": "$3::text", "fingerprint": "$4::text",
			"now": "$5::timestamptz", "lease_until": "$6::timestamptz", "expires_at": "$7::timestamptz",
			"sweep_at": "$8::timestamptz", "take_over": "$10::boolean"}
		r := func(c string) string { return params[c] }
		return `WITH ins AS (
	INSERT INTO ` + table + ` AS t ` + insertCols + `
	VALUES ($1, $2, NULLIF($3::text, ''), ` + fmt.Sprint(state) + `, $4, $9::bigint, 1, $6, $7, $8, $5, $5)
	ON CONFLICT (scope, id) DO NOTHING
	RETURNING ` + recordCols + `
), upd AS (
	` + acquire(table, "", state, r, `t.scope = $1 AND t.id = $2 AND NOT EXISTS (SELECT FROM ins)`) + `
)
SELECT true, * FROM ins
UNION ALL
SELECT true, * FROM upd
UNION ALL
SELECT false, ` + recordCols + ` FROM ` + table + `
WHERE scope = $1 AND id = $2 AND NOT EXISTS (SELECT FROM ins) AND NOT EXISTS (SELECT FROM upd)`
	}
	s.claim, s.mark = single(stInProgress), single(stCompleted)
	// The insert branch alone: a new key (the common case in a business
	// transaction) costs the marker row and nothing else; any other case
	// falls back to the full statement. It returns nothing: the inserted
	// row is the fresh record the request describes, and its affected-row
	// count says whether it was inserted.
	s.markNew = `INSERT INTO ` + table + ` AS t ` + insertCols + `
	VALUES ($1, $2, NULLIF($3::text, ''), ` + fmt.Sprint(stCompleted) + `, $4, $9::bigint, 1, $6, $7, $8, $5, $5)
	ON CONFLICT (scope, id) DO NOTHING`
	// The deferred marker (DeferMark): the insert, and when it inserted
	// nothing the existing record, in one statement, so that a redelivery
	// whose marker went with the handler's first statement needs no
	// statement at all in the run that follows the rollback. No row: the
	// key was inserted. One row: the record, or NULLs when the conflicting
	// row is not in the statement's snapshot (committed after it, or
	// deleted since). The read costs the insert about a fifth more server
	// time; a marker sent first keeps markNew, whose new keys far outnumber
	// the rest (BENCH.md).
	s.markNewOrGet = `WITH ins AS (
	` + s.markNew + `
	RETURNING 1
)
SELECT ` + columns("t.") + `
FROM (VALUES (1)) AS one LEFT JOIN ` + table + ` AS t ON t.scope = $1 AND t.id = $2
WHERE NOT EXISTS (SELECT FROM ins)`

	// Many keys in one statement, in one pass in key order: each key is
	// inserted when new, and otherwise its row is locked (ON CONFLICT DO
	// UPDATE locks the row whether or not its WHERE lets the update
	// through) and taken when acquirable. Every batch thus locks its keys in
	// one global order and two overlapping batches cannot deadlock; an
	// insert of the new keys followed by an update of the existing ones took
	// locks in two passes, and two batches (with a complete queued between
	// them) deadlocked. The upsert sees each row's latest version; a row
	// left as it was is then read from the statement's snapshot (absent when
	// committed after it: the caller runs those keys again). take_over is
	// one scalar ($9) for the whole statement, since the upsert's WHERE sees
	// only the row and EXCLUDED: the caller runs one statement per value.
	batch := func(state int) string {
		ex := map[string]string{"fingerprint": "EXCLUDED.fingerprint", "display_id": "EXCLUDED.display_id",
			"now": "EXCLUDED.updated_at", "lease_until": "EXCLUDED.lease_until", "expires_at": "EXCLUDED.expires_at",
			"sweep_at": "EXCLUDED.sweep_at", "take_over": "$9::boolean"}
		r := func(c string) string { return ex[c] }
		return `WITH req AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[],
		$7::timestamptz[], $8::timestamptz[], $10::bigint[])
		AS r(scope, id, display_id, fingerprint, now, lease_until, expires_at, sweep_at, new_token)
), up AS (
	INSERT INTO ` + table + ` AS t ` + insertCols + `
	SELECT scope, id, NULLIF(display_id, ''), ` + fmt.Sprint(state) + `, fingerprint, new_token, 1, lease_until, expires_at, sweep_at, now, now
	FROM req ORDER BY scope, id
	ON CONFLICT (scope, id) DO UPDATE SET ` + acquireSet(state, r) + `
	WHERE ` + acquirable(r) + `
	RETURNING ` + columns("t.") + `
)
SELECT true, * FROM up
UNION ALL
SELECT false, ` + columns("t.") + ` FROM ` + table + ` t JOIN req r ON t.scope = r.scope AND t.id = r.id
WHERE NOT EXISTS (SELECT FROM up WHERE up.scope = r.scope AND up.id = r.id)`
	}
	s.claimBatch, s.markBatch = batch(stInProgress), batch(stCompleted)
	// The batches' fast path, like Mark's: the insert alone, for a poll of
	// new keys; the keys it does not return go through the full statement,
	// whose anti-joins against the insert's rows cost O(n²) on big batches.
	// It returns only the keys: an inserted row is the fresh record the
	// request describes, which the caller builds without reading it back.
	batchNew := func(state int) string {
		return `WITH req AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[],
		$7::timestamptz[], $8::timestamptz[], $9::boolean[], $10::bigint[])
		AS r(scope, id, display_id, fingerprint, now, lease_until, expires_at, sweep_at, take_over, new_token)
)
INSERT INTO ` + table + ` AS t ` + insertCols + `
SELECT scope, id, NULLIF(display_id, ''), ` + fmt.Sprint(state) + `, fingerprint, new_token, 1, lease_until, expires_at, sweep_at, now, now
FROM req ORDER BY scope, id
ON CONFLICT (scope, id) DO NOTHING
RETURNING scope, id`
	}
	s.claimBatchNew, s.markBatchNew = batchNew(stInProgress), batchNew(stCompleted)
	// The same for the usual poll, whose requests share their scope, clock
	// reading, lease and retention and have short ids: those go as scalars
	// and only ids, fingerprints and new tokens as arrays. Unnesting ten
	// arrays cost about a third of the statement (BENCH.md).
	batchNewShared := func(state int) string {
		return `INSERT INTO ` + table + ` AS t ` + insertCols + `
SELECT $1::text, id, NULL, ` + fmt.Sprint(state) + `, fingerprint, new_token, 1, $5::timestamptz, $6::timestamptz, $7::timestamptz, $4::timestamptz, $4::timestamptz
FROM unnest($2::text[], $3::text[], $8::bigint[]) AS r(id, fingerprint, new_token)
ORDER BY id
ON CONFLICT (scope, id) DO NOTHING
RETURNING id`
	}
	s.claimBatchNewShared, s.markBatchNewShared = batchNewShared(stInProgress), batchNewShared(stCompleted)
	// ClaimBatch, which runs outside any caller's transaction, first tries
	// the plain insert: speculative insertion (ON CONFLICT) cost a third of
	// the rate on batches of new keys (BENCH.md). A key that exists fails
	// the statement with a unique violation, which rolls back that
	// statement alone, and the batch goes the ON CONFLICT way. Never inside
	// a caller's transaction: there the violation would abort it.
	plain := func(q string) string {
		q = strings.TrimSuffix(q, "\nRETURNING id")
		q = strings.TrimSuffix(q, "\nRETURNING scope, id")
		q = strings.TrimSuffix(q, "\nON CONFLICT (scope, id) DO NOTHING")
		if strings.Contains(q, "ON CONFLICT") || strings.Contains(q, "RETURNING") {
			panic("postgres: plain batch insert still has ON CONFLICT or RETURNING: " + q)
		}
		return q
	}
	s.claimBatchPlain, s.claimBatchPlainShared = plain(s.claimBatchNew), plain(s.claimBatchNewShared)

	// The fenced updates. Complete usually leaves sweep_at unchanged (its
	// retention ends a handler's duration after the claim's, see
	// keepSweepAt) and touches no other indexed column, so PostgreSQL can
	// update the row in place on its page (HOT). Renew carries the
	// retention with the lease ($4): expires_at rises only when the lease
	// outlives it, and sweep_at ($6, the lease end's sweepAt) only when the
	// lease ends more than sweepSlack past it, so the usual renewal stays
	// HOT too.
	fence := ` WHERE scope = $1 AND id = $2 AND state = ` + fmt.Sprint(stInProgress) + ` AND token = $3`
	s.complete = `UPDATE ` + table + ` SET state = ` + fmt.Sprint(stCompleted) +
		`, result = $4, expires_at = $5, sweep_at = ` + keepSweepAt("", "$6::timestamptz") + `, updated_at = $7` + fence
	s.release = `UPDATE ` + table + ` SET state = ` + fmt.Sprint(stReleased) + `, lease_until = $4, updated_at = $4` + fence
	s.renew = `UPDATE ` + table + ` SET lease_until = $4, expires_at = GREATEST(expires_at, $4),
	sweep_at = CASE WHEN $6::timestamptz > sweep_at + ` + sweepSlackSQL + ` THEN $6::timestamptz ELSE sweep_at END,
	updated_at = $5` + fence
	s.saveResult = `UPDATE ` + table + ` SET result = $3 WHERE scope = $1 AND id = $2`
	s.get = `SELECT ` + recordCols + ` FROM ` + table + ` WHERE scope = $1 AND id = $2`
	s.list = `SELECT ` + recordCols + ` FROM ` + table

	// One batch of expired rows, by one instance at a time: the advisory
	// lock is tried once (an InitPlan) and a false result turns the whole
	// statement into a no-op. SKIP LOCKED passes over rows a claim is
	// reviving right now, so the sweep never waits for claims; claims wait at
	// most for this one small statement. The rows are deleted through the
	// primary key (a nested loop of index probes), which is also correct on
	// a partitioned table, where a ctid names a row only within a partition.
	// An in-progress row is never expired, whatever its expires_at, and
	// stays, live or stale. Every row's sweep_at is at most its expires_at
	// (see sweepAt), so a row is found as soon as it expired.
	s.sweep = `WITH victims AS (
	SELECT scope, id FROM ` + table + `
	WHERE sweep_at <= $1 AND ` + expired("", "$1") + ` AND (SELECT pg_try_advisory_xact_lock($3, $4))
	ORDER BY sweep_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED)
DELETE FROM ` + table + ` WHERE (scope, id) IN (SELECT scope, id FROM victims)`

	s.stats = fmt.Sprintf(`SELECT scope,
	count(*) FILTER (WHERE state = %[1]d),
	count(*) FILTER (WHERE state = %[2]d),
	count(*) FILTER (WHERE state = %[3]d),
	count(*) FILTER (WHERE state = %[1]d AND lease_until <= $1),
	count(*) FILTER (WHERE %[4]s),
	min(created_at) FILTER (WHERE state = %[1]d)
FROM `+table+` GROUP BY scope ORDER BY scope`, stInProgress, stCompleted, stReleased, expired("", "$1"))
	return s
}

// columns is recordCols with each column qualified by p ("t.").
func columns(p string) string {
	return strings.NewReplacer("{p}", p).Replace(
		`{p}scope, {p}id, {p}state, {p}token, {p}attempts, {p}retaken, {p}lease_until, {p}expires_at, ` +
			`{p}created_at, {p}updated_at, {p}fingerprint, {p}result, COALESCE({p}display_id, {p}id)`)
}
