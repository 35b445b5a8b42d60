-- Runs: one row for each root run from every door, written by the runs recorder off the
-- request path. The filtered fields are columns; `detail` is JSON (the chain's entries,
-- logs, agent turns). `seq` orders rows and is the cursor of `GET /runs`.
CREATE TABLE IF NOT EXISTS sg_runs (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT    NOT NULL UNIQUE,
    door        TEXT    NOT NULL,
    principal   TEXT    NOT NULL,
    skill       TEXT    NOT NULL,
    started_ms  INTEGER NOT NULL,
    duration_us INTEGER NOT NULL,
    status      TEXT    NOT NULL,
    problem     TEXT,
    parent      TEXT,
    args        TEXT    NOT NULL,
    result      TEXT,
    detail      TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS sg_runs_started ON sg_runs (started_ms);
CREATE INDEX IF NOT EXISTS sg_runs_principal ON sg_runs (principal, seq);
