-- pgqueue schema, version 9: results.
--
-- A handler's return value is stored with its job, written by the statement that records
-- the completion (for transactional handlers, in the handler's own transaction):
--   result   jsonb, NULL when the handler returned None (and for every other final state).
--            It lives in the finished partition with the rest of the row, so retention
--            removes it with its day.
--   awaited  true on a live job that some process waits for (handle.result()). Whatever
--            moves a job out of the live partition reads it from the row it locked and,
--            if any job it finished was awaited, sends one NOTIFY on the results channel
--            (schema name + '_results', empty payload) for the whole statement. Jobs
--            nobody waits for never cause one.
--
-- Why a flag on the job's row and not a table of waits: a waiter sets it with an UPDATE,
-- which locks the row like every writer that finishes a job does. Either the waiter locks
-- first, and the finisher (which locks after it commits) reads the flag from the row's
-- newest version; or the finisher locks first, the waiter's UPDATE waits for it and finds
-- the row gone, and the waiter's next statement sees the job finished. A separate table
-- would be read with the finisher's statement snapshot, taken before its locks, and a wait
-- registered in between would go unnoticed. The flag needs no clean-up: it leaves with the
-- live row (finished rows never carry it).
--
-- Both columns are added to the partitioned parent without a default: no row is rewritten.

ALTER TABLE {schema}.jobs ADD COLUMN result jsonb;
ALTER TABLE {schema}.jobs ADD COLUMN awaited boolean;

COMMENT ON COLUMN {schema}.jobs.result IS
    'The handler''s return value (JSON) of a completed job; NULL if it returned None, and for every other state.';
COMMENT ON COLUMN {schema}.jobs.awaited IS
    'Live jobs only: some process waits for this job''s result; finishing it sends a NOTIFY on the results channel.';

-- -- job_results(): what a waiter reads ----------------------------------------------------
-- One row per id that exists: live jobs with their state only; finished ones with their
-- result and their last error's type and message (what pgqueue.JobFailed carries). Ids
-- found live are not looked up again in the finished partitions. The roles script makes it
-- SECURITY DEFINER, so that producers can wait for results without reading errors whole.

CREATE FUNCTION {schema}.job_results(ids bigint[])
RETURNS TABLE (id bigint, state {schema}.job_state, result jsonb, error_type text, error_message text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    WITH live AS (
        SELECT j.id, j.state FROM {schema}.jobs_live AS j WHERE j.id = ANY(job_results.ids)
    )
    SELECT l.id, l.state, NULL::jsonb, NULL::text, NULL::text FROM live AS l
    UNION ALL
    SELECT f.id, f.state, f.result, f.errors -> -1 ->> 'type', f.errors -> -1 ->> 'message'
    FROM {schema}.jobs AS f
    WHERE f.state IN ('completed', 'discarded', 'cancelled')
      AND f.id = ANY(ARRAY(SELECT i FROM unnest(job_results.ids) AS i EXCEPT SELECT l.id FROM live AS l))
$fn$;

COMMENT ON FUNCTION {schema}.job_results(bigint[]) IS
    'The state of each job of ids that exists; for finished ones also the result and the last error (type, message).';

-- -- cancel_job(): as in 0007, and it wakes the job's waiters -----------------------------

CREATE OR REPLACE FUNCTION {schema}.cancel_job(job_id bigint) RETURNS {schema}.job_state
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_state {schema}.job_state;
    v_awaited boolean;
BEGIN
    -- Each statement sees rows committed before it started; a job changing state between
    -- two of them (claimed, finished, retried) is caught by the next round.
    FOR i IN 1..5 LOOP
        WITH gone AS (
            DELETE FROM {schema}.jobs_live AS j
            WHERE j.id = cancel_job.job_id AND j.state IN ('available', 'scheduled', 'retryable')
            RETURNING j.*
        ), moved AS (
            INSERT INTO {schema}.jobs
                (id, queue, task, args, state, priority, run_at, scheduled_at, attempt, max_attempts,
                 unique_key, created_at, started_at, finished_at, worker_id, errors, cancel_requested_at,
                 concurrency_key, expires_at, snoozes, dedupe_key)
            SELECT id, queue, task, args, 'cancelled', priority, run_at, coalesce(scheduled_at, run_at),
                   attempt, max_attempts, unique_key, created_at, started_at, now(), worker_id, errors, now(),
                   concurrency_key, expires_at, snoozes, dedupe_key
            FROM gone
            RETURNING state
        )
        SELECT (SELECT m.state FROM moved AS m), (SELECT g.awaited FROM gone AS g) INTO v_state, v_awaited;
        IF v_state IS NOT NULL THEN
            IF v_awaited THEN
                PERFORM pg_notify({results_channel}, '');
            END IF;
            RETURN v_state;
        END IF;
        UPDATE {schema}.jobs_live AS j
        SET cancel_requested_at = coalesce(j.cancel_requested_at, now())
        WHERE j.id = cancel_job.job_id AND j.state = 'running'
        RETURNING j.state INTO v_state;
        IF v_state IS NOT NULL THEN
            RETURN v_state;
        END IF;
        SELECT j.state INTO v_state FROM {schema}.jobs AS j WHERE j.id = cancel_job.job_id;
        IF v_state IS NULL OR v_state IN ('completed', 'discarded', 'cancelled') THEN
            RETURN v_state;
        END IF;
    END LOOP;
    RETURN v_state;
END
$fn$;
