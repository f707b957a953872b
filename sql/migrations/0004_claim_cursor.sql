-- The claim's index, keyed so that one row comparison can resume a scan where the last
-- claim ended: ((-priority), run_at, id) ascending is the claim order (priority DESC,
-- run_at, id). While a backlog drains, each worker claims "after" the last job it took
-- instead of from the head of the index, so index entries left behind by claimed jobs
-- (dead, but not removable while some transaction holds an old snapshot) are not walked
-- again on every claim. -priority is computed as integer: smallint cannot negate -32768.
DROP INDEX {schema}.jobs_live_fetch;
CREATE INDEX jobs_live_fetch ON {schema}.jobs_live (queue, (-priority::integer), run_at, id)
    WHERE state = 'available';
