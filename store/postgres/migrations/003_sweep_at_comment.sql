-- The store now writes sweep_at as the claim's expires_at rounded down to
-- the second, kept at most a minute behind expires_at by completes and
-- renewals, so that the sweep finds a row as soon as it expired. Only the
-- column's comment changes (a catalog update, instant on any table size);
-- rows written before keep their rounded-up value and are swept up to a
-- minute after they expire.
COMMENT ON COLUMN {{.Table}}.sweep_at IS 'the claim''s expires_at rounded down to the second, at most expires_at and at most a minute behind it after an update: the indexed sweep column (unchanged by most completes and renewals, so they stay HOT)';
