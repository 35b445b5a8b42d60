-- Blocks of plain runs (ended well, nothing in their detail, no parent): one row holds a
-- batch's stretch of them, packed in `packed` (`events::run_blocks`), with how many
-- (`packed_runs`) and the earliest and latest start (`started_ms`, `started_last_ms`), so a
-- listing passes a block over by status or time without reading it. A row of one run has all
-- three NULL. Writing a row a run cost most of what the record costs a run.
ALTER TABLE sg_runs ADD COLUMN IF NOT EXISTS packed BYTEA;
ALTER TABLE sg_runs ADD COLUMN IF NOT EXISTS packed_runs BIGINT;
ALTER TABLE sg_runs ADD COLUMN IF NOT EXISTS started_last_ms BIGINT;
