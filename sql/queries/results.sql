-- Results: what waiting for a job's result runs (pgqueue/_db/results.py). The worker's side
-- (storing a result, announcing it) is part of job_record_outcomes and maintenance_tick.

-- name: results_listen
-- A waiter's subscription to the results channel (NOTIFY with an empty payload whenever a
-- statement finished at least one awaited job).
LISTEN {results_channel_ident}

-- name: job_await
-- Mark live jobs as awaited, before their state is read (job_results, in a later statement,
-- so with a later snapshot): from now on whatever finishes one of them sends a NOTIFY on
-- the results channel. Rows are locked in id order like every other multi-row writer of the
-- live partition; a row being finished meanwhile is waited for and then found gone (its
-- result is read next). Jobs already flagged are left as they are (no write).
-- The lock can make a concurrent claim skip an available job for an instant: the queues of
-- the available jobs marked here are woken, so no worker waits for its poll to pick them up.
-- Returns (jobs marked, queues woken).
WITH locked AS MATERIALIZED (
    SELECT j.id
    FROM {schema}.jobs_live AS j
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.awaited IS NOT TRUE
    ORDER BY j.id
    FOR UPDATE
), flagged AS (
    UPDATE {schema}.jobs_live AS j
    SET awaited = true
    FROM locked AS l
    WHERE j.id = l.id
    RETURNING j.state, j.queue
), woken AS (
    SELECT pg_notify({channel}, q) FROM (SELECT DISTINCT queue FROM flagged WHERE state = 'available') AS f(q)
)
SELECT (SELECT count(*) FROM flagged), (SELECT count(*) FROM woken)

-- name: job_results
-- The state of each of these jobs that exists; finished ones with their result and last
-- error (see job_results() in migration 0009).
SELECT id, state::text, result::text, error_type, error_message FROM {schema}.job_results(%(ids)s::bigint[])
