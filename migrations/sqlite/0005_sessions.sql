-- Sessions: per-key history of invocations kept by the `session` middleware. `entry` is the
-- captured JSON (args, result, agent trace); `id` orders a key's entries, oldest first.
CREATE TABLE IF NOT EXISTS sg_sessions (
    id    INTEGER PRIMARY KEY AUTOINCREMENT,
    key   TEXT    NOT NULL,
    at_ms INTEGER NOT NULL,
    entry TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS sg_sessions_key ON sg_sessions (key, id);
