package outboxpostgres

import "strings"

// statements are the store's SQL, rendered for its tables.
type statements struct {
	insertOne, insertMany, enqueueOne, enqueueMany            string
	fetch, markPublished, markFailed, lease, release, cleanup string
	stats, list, retry                                        string
}

// columns of a record as Fetch and List read them (scanRecord).
const recordColumns = `seq, id, destination, routing_key, ordering_key, headers, payload, fingerprint,
	created_at, next_attempt_at, attempts, last_error, parked, published_at, not_before`

// The enqueue statements insert the messages of m and skip the ids already
// held with the same fingerprint. An id held with another one is "updated"
// to what it holds (nothing changes; the update only makes ON CONFLICT see
// and lock the latest committed row, where DO NOTHING could not report a
// row committed after the statement's snapshot), so the statement returns
// the id and fingerprint of every message inserted or in conflict: a
// fingerprint that is not the message's own is a conflict.
const (
	oneMessage = `SELECT $1::text AS id, $2::text AS d, $3::text AS rk, $4::text AS ok, $5::text AS h, $6::bytea AS p, $7::text AS fp, $8::timestamptz AS nb, 1 AS ord`
	messages   = `SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::text[], $8::timestamptz[])
		WITH ORDINALITY AS u(id, d, rk, ok, h, p, fp, nb, ord)`
)

const onConflict = `
	ON CONFLICT (id) DO UPDATE SET fingerprint = {{T}}.fingerprint WHERE {{T}}.fingerprint <> EXCLUDED.fingerprint
	RETURNING id, fingerprint`

func insert(m, where string) string {
	return `INSERT INTO {{T}} (id, destination, routing_key, ordering_key, headers, payload, fingerprint, not_before, created_at, next_attempt_at)
	SELECT m.id, m.d, m.rk, m.ok, m.h, m.p, m.fp, m.nb, $9::timestamptz, $9::timestamptz FROM (` + m + `) AS m` + where + `
	ORDER BY m.ord` + onConflict
}

// locked is the insert taking the ordering keys' locks ($11, $12) before
// any Seq is drawn (the rows are filtered on the count of the locks CTE, a
// one-time filter evaluated before the first row, and so its identity
// value, is produced), and NOTIFYing the channel ($10) when it is set and a
// row was written.
func locked(m string) string {
	return `WITH l AS MATERIALIZED (
	SELECT pg_advisory_xact_lock($11::int4, k) FROM unnest($12::int4[]) AS k ORDER BY k
), ins AS (
	` + insert(m, `
	WHERE (SELECT count(*) FROM l) >= 0`) + `
), n AS (
	SELECT pg_notify($10::text, '') WHERE $10::text <> ''
)
SELECT id, fingerprint, (SELECT count(*) FROM n) FROM ins`
}

func buildStatements(table, lease string) statements {
	r := strings.NewReplacer("{{T}}", table, "{{L}}", lease)
	return statements{
		insertOne: r.Replace(`INSERT INTO {{T}} (id, destination, routing_key, ordering_key, headers, payload, fingerprint, not_before, created_at, next_attempt_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)` + onConflict),
		insertMany:  r.Replace(insert(messages, "")),
		enqueueOne:  r.Replace(locked(oneMessage)),
		enqueueMany: r.Replace(locked(messages)),

		// A key is blocked from its first pending record that is parked or
		// backing off; such records are few and indexed (_failed_idx).
		fetch: r.Replace(`WITH blocked AS MATERIALIZED (
	SELECT ordering_key, min(seq) AS seq FROM {{T}}
	WHERE published_at IS NULL AND ordering_key <> '' AND (parked OR attempts > 0)
		AND (parked OR next_attempt_at > $1)
	GROUP BY ordering_key
)
SELECT ` + recordColumns + ` FROM {{T}} o
WHERE o.published_at IS NULL AND NOT o.parked AND o.next_attempt_at <= $1
	AND o.seq NOT IN (SELECT unnest($3::bigint[]))
	AND NOT EXISTS (SELECT 1 FROM blocked b WHERE b.ordering_key = o.ordering_key AND b.seq < o.seq)
ORDER BY o.seq
LIMIT $2`),
		markPublished: r.Replace(`UPDATE {{T}} SET published_at = $1 WHERE seq = ANY($2::bigint[]) AND published_at IS NULL`),
		markFailed: r.Replace(`UPDATE {{T}} AS t SET attempts = u.a, next_attempt_at = u.n, last_error = u.e, parked = u.p
FROM unnest($1::bigint[], $2::int4[], $3::timestamptz[], $4::text[], $5::bool[]) AS u(seq, a, n, e, p)
WHERE t.seq = u.seq AND t.published_at IS NULL`),

		// Renewed by its holder while it lasts; taken, with the next token,
		// once it ended. Otherwise the row as it is.
		lease: r.Replace(`WITH up AS (
	INSERT INTO {{L}} AS l (name, owner, token, until) VALUES ('relay', $1, 1, $4)
	ON CONFLICT (name) DO UPDATE SET
		owner = EXCLUDED.owner,
		token = CASE WHEN l.owner = $1 AND l.token = $2 AND $2 <> 0 AND l.until > $3 THEN l.token ELSE l.token + 1 END,
		until = EXCLUDED.until
	WHERE (l.owner = $1 AND l.token = $2 AND $2 <> 0 AND l.until > $3) OR l.until <= $3
	RETURNING owner, token, until
)
SELECT owner, token, until FROM up
UNION ALL
SELECT owner, token, until FROM {{L}} WHERE name = 'relay' AND NOT EXISTS (SELECT 1 FROM up)`),
		release: r.Replace(`UPDATE {{L}} SET until = 'epoch' WHERE name = 'relay' AND owner = $1 AND token = $2`),
		cleanup: r.Replace(`DELETE FROM {{T}} WHERE seq = ANY(ARRAY(
	SELECT seq FROM {{T}} WHERE published_at < $1 ORDER BY published_at LIMIT $2))`),

		stats: r.Replace(`SELECT
	(SELECT count(*) FROM {{T}} WHERE published_at IS NULL AND NOT parked),
	(SELECT count(*) FROM {{T}} WHERE published_at IS NULL AND parked),
	(SELECT count(*) FROM {{T}} WHERE published_at IS NOT NULL),
	(SELECT min(created_at) FROM {{T}} WHERE published_at IS NULL AND NOT parked),
	l.owner, l.token, l.until
FROM (SELECT 1) AS one LEFT JOIN {{L}} AS l ON l.name = 'relay'`),
		// {{STATE}} is the state's own predicate, so that pending and
		// parked records are listed through the pending rows' index.
		list: r.Replace(`SELECT ` + recordColumns + ` FROM {{T}}
WHERE seq > $1 AND {{STATE}}
	AND ($2 = '' OR destination = $2) AND ($3 = '' OR ordering_key = $3)
ORDER BY seq
LIMIT $4`),
		retry: r.Replace(`UPDATE {{T}} SET parked = false, attempts = 0, next_attempt_at = $1
WHERE published_at IS NULL AND parked AND (cardinality($2::bigint[]) = 0 OR seq = ANY($2::bigint[]))`),
	}
}
