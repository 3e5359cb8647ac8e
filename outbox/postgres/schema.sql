-- The outbox: one row per message. Pending rows are found through the
-- partial index on seq (published rows leave it), failed and parked rows
-- through the small index of the rows whose key they may hold back, and
-- published rows for cleanup through the index on published_at.
CREATE TABLE IF NOT EXISTS {{.Table}} (
    seq             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id              text        NOT NULL,
    destination     text        NOT NULL,
    routing_key     text        NOT NULL DEFAULT '',
    ordering_key    text        NOT NULL DEFAULT '',
    headers         text        NOT NULL DEFAULT '',
    payload         bytea       NOT NULL,
    fingerprint     text        NOT NULL,
    created_at      timestamptz NOT NULL,
    next_attempt_at timestamptz NOT NULL,
    attempts        integer     NOT NULL DEFAULT 0,
    last_error      text        NOT NULL DEFAULT '',
    parked          boolean     NOT NULL DEFAULT false,
    published_at    timestamptz,
    not_before      timestamptz
) WITH (autovacuum_vacuum_scale_factor = 0.02);
-- Tables made before Message.NotBefore existed get its column.
ALTER TABLE {{.Table}} ADD COLUMN IF NOT EXISTS not_before timestamptz;
CREATE UNIQUE INDEX IF NOT EXISTS {{.IDIndex}} ON {{.Table}} (id);
CREATE INDEX IF NOT EXISTS {{.PendingIndex}} ON {{.Table}} (seq) WHERE published_at IS NULL;
CREATE INDEX IF NOT EXISTS {{.FailedIndex}} ON {{.Table}} (ordering_key, seq)
    WHERE published_at IS NULL AND ordering_key <> '' AND (parked OR attempts > 0);
CREATE INDEX IF NOT EXISTS {{.PublishedIndex}} ON {{.Table}} (published_at) WHERE published_at IS NOT NULL;
-- The relay lease: one row, whose token grows with every new holder.
CREATE TABLE IF NOT EXISTS {{.Lease}} (
    name  text        PRIMARY KEY,
    owner text        NOT NULL,
    token bigint      NOT NULL,
    until timestamptz NOT NULL
);
