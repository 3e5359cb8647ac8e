-- Version 2: unset times are NULL, never 0. Version 1 declared the time
-- columns NOT NULL and read 0 back as unset, so a lease ending exactly at the
-- epoch read as no lease; every integer is now a real time (0 the epoch,
-- negative values before it) and unset is NULL.
--
-- SQLite cannot drop a NOT NULL constraint in place, so the table is rebuilt
-- (the documented 12-step procedure, inside Migrate's write transaction) as
-- {{new}} and renamed. Each 0 that version 1 stored meant "unset" (an
-- expires_at of 0, from rows written before expiries were required, meant
-- "never expires") and becomes NULL.
CREATE TABLE {{new}} (
	scope       TEXT    NOT NULL,
	id          TEXT    NOT NULL,
	display_id  TEXT    NOT NULL,
	state       TEXT    NOT NULL,
	fingerprint TEXT    NOT NULL DEFAULT '',
	result      BLOB,
	token       INTEGER NOT NULL,
	attempts    INTEGER NOT NULL,
	lease_until INTEGER,
	expires_at  INTEGER,
	created_at  INTEGER,
	updated_at  INTEGER,
	PRIMARY KEY (scope, id)
);

INSERT INTO {{new}} (scope, id, display_id, state, fingerprint, result, token, attempts,
		lease_until, expires_at, created_at, updated_at)
	SELECT scope, id, display_id, state, fingerprint, result, token, attempts,
		NULLIF(lease_until, 0), NULLIF(expires_at, 0), NULLIF(created_at, 0), NULLIF(updated_at, 0)
	FROM {{table}};

DROP TABLE {{table}};

ALTER TABLE {{new}} RENAME TO {{table}};

CREATE INDEX IF NOT EXISTS {{index}} ON {{table}} (expires_at);
