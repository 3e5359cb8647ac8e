-- Drop the CHECK on state that 001 created. PostgreSQL rebuilds a CHECK
-- constraint's expression from its stored text in every statement that
-- inserts or updates a row, which cost the transactional inbox 3 to 5
-- points of its rate against a bare insert (BENCH.md). The store is the
-- only writer of state and writes only the three values its statements
-- name. Only the constraint on state alone is dropped; a CHECK of the
-- operator's own stays.
DO $$
DECLARE
	c name;
BEGIN
	FOR c IN SELECT conname FROM pg_constraint
		WHERE conrelid = '{{.Table}}'::regclass AND contype = 'c' AND conislocal
			AND conkey = ARRAY[(SELECT attnum FROM pg_attribute
				WHERE attrelid = '{{.Table}}'::regclass AND attname = 'state')]
	LOOP
		EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', '{{.Table}}'::regclass, c);
	END LOOP;
END $$;

COMMENT ON COLUMN {{.Table}}.state IS '1 in_progress, 2 completed, 3 released (written by the store alone)';
