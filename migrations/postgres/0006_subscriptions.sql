-- Handler subscriptions made with `event-subscribe`: the skill, its args and the principal it
-- runs for (`spec`, JSON skillgate reads), so a worker is started again for each after a
-- restart. Declared routes are not kept here: the skills declare them at each start.
CREATE TABLE IF NOT EXISTS sg_subscriptions (
    topic TEXT NOT NULL,
    queue TEXT NOT NULL,
    spec  TEXT NOT NULL,
    PRIMARY KEY (topic, queue)
);
