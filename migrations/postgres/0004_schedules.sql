-- Schedules: a skill fired on a cron expression or an interval. `spec` is the schedule as
-- skillgate reads it (JSON); `next_ms` is the next firing (NULL once it ran its `times`), taken
-- with a compare-and-set on it so each firing runs on one process only.
CREATE TABLE IF NOT EXISTS sg_schedules (
    name    TEXT    PRIMARY KEY,
    spec    TEXT    NOT NULL,
    next_ms BIGINT,
    runs    BIGINT NOT NULL DEFAULT 0
);
