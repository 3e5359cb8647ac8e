-- The records table. Keys are VARBINARY so they compare byte for byte (no
-- collation folds case, accents or trailing spaces); the primary key holds at
-- most 200 + 200 bytes, far under InnoDB's 3072-byte limit. Times are Unix
-- milliseconds. display_id is NULL unless the id was hashed.
CREATE TABLE IF NOT EXISTS {{table}} (
    scope       VARBINARY(200)  NOT NULL,
    id          VARBINARY(200)  NOT NULL,
    display_id  VARBINARY(1024) NULL,
    state       ENUM('in_progress', 'completed', 'released') NOT NULL,
    fingerprint VARBINARY(1024) NOT NULL DEFAULT '',
    result      LONGBLOB        NULL,
    token       BIGINT          NOT NULL,
    attempts    INT             NOT NULL,
    lease_until BIGINT          NOT NULL,
    expires_at  BIGINT          NOT NULL,
    created_at  BIGINT          NOT NULL,
    updated_at  BIGINT          NOT NULL,
    PRIMARY KEY (scope, id),
    KEY expires_at (expires_at)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
