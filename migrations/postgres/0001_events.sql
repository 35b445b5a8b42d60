-- Event bus: per-topic replay buffers, consumer-group queues, deliveries in flight.
CREATE TABLE IF NOT EXISTS sg_events (
    seq        BIGSERIAL PRIMARY KEY,
    topic      TEXT   NOT NULL,
    id         TEXT   NOT NULL,
    body       TEXT   NOT NULL,
    created_ms BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS sg_events_topic ON sg_events (topic, seq);

CREATE TABLE IF NOT EXISTS sg_queues (
    topic      TEXT   NOT NULL,
    name       TEXT   NOT NULL,
    created_ms BIGINT NOT NULL,
    PRIMARY KEY (topic, name)
);

CREATE TABLE IF NOT EXISTS sg_deliveries (
    seq        BIGSERIAL PRIMARY KEY,
    topic      TEXT    NOT NULL,
    queue      TEXT    NOT NULL,
    event_id   TEXT    NOT NULL,
    body       TEXT    NOT NULL,
    position   BIGINT  NOT NULL,
    attempts   INTEGER NOT NULL DEFAULT 0,
    visible_ms BIGINT  NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS sg_deliveries_order ON sg_deliveries (topic, queue, position);
CREATE INDEX IF NOT EXISTS sg_deliveries_event ON sg_deliveries (topic, queue, event_id);
