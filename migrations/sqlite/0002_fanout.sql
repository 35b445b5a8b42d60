-- An emitted event fans out to every queue of its topic inside the INSERT's own transaction,
-- so an emit is one statement.
CREATE TRIGGER IF NOT EXISTS sg_events_fanout AFTER INSERT ON sg_events
BEGIN
    INSERT INTO sg_deliveries (topic, queue, event_id, body, position)
    SELECT NEW.topic, name, NEW.id, NEW.body, NEW.seq FROM sg_queues WHERE topic = NEW.topic;
END;
