-- Claiming an entry updates it in place (attempts, visibility): with room left on each page
-- the new row version stays on its page and no index is touched (a HOT update).
ALTER TABLE sg_deliveries SET (fillfactor = 50);
-- Entries are settled by their sequence (the primary key) now, not by event id.
DROP INDEX IF EXISTS sg_deliveries_event;
