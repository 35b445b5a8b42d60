-- Once-only claims: a key (a webhook delivery id, an Idempotency-Key) is held by whoever inserted
-- it first, until it expires; `response` is what the first holder answered, for replays.
CREATE TABLE IF NOT EXISTS sg_claims (
    key         TEXT    PRIMARY KEY,
    fingerprint TEXT    NOT NULL,
    expires_ms  INTEGER NOT NULL,
    response    TEXT
);
CREATE INDEX IF NOT EXISTS sg_claims_expiry ON sg_claims (expires_ms);
