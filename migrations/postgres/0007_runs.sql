-- Runs: one row for each root run from every door, written by the runs recorder off the
-- request path. The filtered fields are columns; `detail` is JSON (the chain's entries,
-- logs, agent turns). `seq` orders rows and is the cursor of `GET /runs`; a listing walks back
-- from the newest, through at most the retained runs (`--runs-max`). The server keeps the
-- index on `id`, off the replicas' CPU.
CREATE TABLE IF NOT EXISTS sg_runs (
    seq         BIGSERIAL PRIMARY KEY,
    id          TEXT    NOT NULL,
    door        TEXT    NOT NULL,
    principal   TEXT    NOT NULL,
    skill       TEXT    NOT NULL,
    started_ms  BIGINT  NOT NULL,
    duration_us BIGINT  NOT NULL,
    status      TEXT    NOT NULL,
    problem     TEXT,
    parent      TEXT,
    args        TEXT    NOT NULL,
    result      TEXT,
    detail      TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS sg_runs_id ON sg_runs (id);
