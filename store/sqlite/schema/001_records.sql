-- Version 1: the records table and its sweep index.
--
-- {{table}} and {{index}} are replaced by the quoted, validated table name and
-- the name of its expiry index. Times are integer unix milliseconds (UTC);
-- 0 means "not set". The table keeps its rowid so the sweeper can delete a
-- bounded batch by rowid without a second lookup through the primary key.
CREATE TABLE IF NOT EXISTS {{table}} (
	scope       TEXT    NOT NULL,
	id          TEXT    NOT NULL,
	display_id  TEXT    NOT NULL,
	state       TEXT    NOT NULL,
	fingerprint TEXT    NOT NULL DEFAULT '',
	result      BLOB,
	token       INTEGER NOT NULL,
	attempts    INTEGER NOT NULL,
	lease_until INTEGER NOT NULL,
	expires_at  INTEGER NOT NULL,
	created_at  INTEGER NOT NULL,
	updated_at  INTEGER NOT NULL,
	PRIMARY KEY (scope, id)
);

CREATE INDEX IF NOT EXISTS {{index}} ON {{table}} (expires_at);
