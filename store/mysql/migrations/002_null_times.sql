-- Unset times are NULL, never 0. Version 1 declared the time columns NOT
-- NULL and read 0 as unset: a lease ending exactly at the epoch read back
-- as no lease, and the sweep and Stats skipped every record whose retention
-- ended before 1970 (expires_at > 0). Every number is now a real time (0 the
-- epoch, negative values before it) and unset is NULL.
--
-- The only 0 whose meaning differs from the epoch's is expires_at's (the
-- "never expires" of rows written before expiries were required): it
-- becomes NULL through the expires_at index. A 0 in the other columns
-- (never written by a version that set all four) read as unset, which for
-- them behaves as the epoch does, so no full scan rewrites them.
ALTER TABLE {{table}}
    MODIFY lease_until BIGINT NULL,
    MODIFY expires_at  BIGINT NULL,
    MODIFY created_at  BIGINT NULL,
    MODIFY updated_at  BIGINT NULL;
UPDATE {{table}} SET expires_at = NULL WHERE expires_at = 0;
