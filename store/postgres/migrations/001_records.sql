-- The records table. Columns are ordered widest fixed-size first so rows
-- carry no alignment padding; variable-size columns come last. Keys compare
-- bytewise (COLLATE "C"): ids are opaque, C comparisons are the cheapest, and
-- the primary key order is the (scope, id) order List pages through.
CREATE TABLE {{.Table}} (
    token       bigint      NOT NULL,
    lease_until timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    sweep_at    timestamptz NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    attempts    integer     NOT NULL,
    state       smallint    NOT NULL CHECK (state IN (1, 2, 3)),
    retaken     boolean     NOT NULL DEFAULT false,
    scope       text        COLLATE "C" NOT NULL,
    id          text        COLLATE "C" NOT NULL,
    display_id  text,
    fingerprint text        NOT NULL DEFAULT '',
    result      bytea,
    PRIMARY KEY (scope, id)
){{if .Partitions}} PARTITION BY HASH (scope, id){{else}} WITH ({{.Storage}}){{end}};

COMMENT ON TABLE {{.Table}} IS 'idem dedup records (github.com/idemgo/idem store/postgres)';
COMMENT ON COLUMN {{.Table}}.state IS '1 in_progress, 2 completed, 3 released';
COMMENT ON COLUMN {{.Table}}.sweep_at IS 'expires_at rounded up to the next minute: the indexed sweep column (unchanged by most completes, so they stay HOT)';
COMMENT ON COLUMN {{.Table}}.display_id IS 'the original id when id holds its sha256; NULL when equal to id';
COMMENT ON COLUMN {{.Table}}.retaken IS 'the current claim took over an in-progress record whose lease had ended';
{{range .Partitions}}
CREATE TABLE {{.Name}} PARTITION OF {{$.Table}} FOR VALUES WITH (MODULUS {{.Modulus}}, REMAINDER {{.Remainder}}) WITH ({{$.Storage}});
{{- end}}

CREATE INDEX {{.SweepIndex}} ON {{.Table}} (sweep_at);
