CREATE TABLE IF NOT EXISTS hopper_migrations (
    version    INT    NOT NULL PRIMARY KEY,
    applied_at BIGINT NOT NULL
) ENGINE = InnoDB
