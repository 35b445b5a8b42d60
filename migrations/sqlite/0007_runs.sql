-- Runs: one row for each root run from every door, written by the runs recorder off the
-- request path. The filtered fields are columns; `detail` is JSON (the chain's entries,
-- logs, agent turns). `seq` orders rows and is the cursor of `GET /runs`. No other index:
-- every run writes a row (an index on the random `id` cost a third of the throughput of a
-- server answering no-op runs), and a listing walks back from the newest (`seq`), a lookup by
-- id through at most the retained runs (`--runs-max`).
CREATE TABLE IF NOT EXISTS sg_runs (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT    NOT NULL,
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
