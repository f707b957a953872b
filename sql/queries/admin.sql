-- Operations on jobs and the status snapshot: pgqueue.ops, `pgqueue jobs`, `status`, `top`
-- and the demo. Run by pgqueue._admin_db only.

-- name: job_list
-- The most recent jobs (highest id first), optionally of one queue and one task.
SELECT id, queue, task, state::text AS state, priority, attempt, max_attempts, run_at, created_at,
       started_at, finished_at, unique_key, worker_id, jsonb_array_length(errors) AS error_count,
       CASE WHEN jsonb_array_length(errors) > 0 THEN
           coalesce(errors -> -1 ->> 'type', 'Error') || ': ' || coalesce(errors -> -1 ->> 'message', '')
       END AS last_error,
       coalesce(scheduled_at, run_at) AS scheduled_at, snoozes, expires_at, concurrency_key, dedupe_key
FROM {schema}.jobs
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(task)s::text IS NULL OR task = %(task)s)
ORDER BY id DESC
LIMIT %(limit)s

-- name: job_list_in_state
-- job_list within one state: the state's partition alone is read (pruned also at run time).
SELECT id, queue, task, state::text AS state, priority, attempt, max_attempts, run_at, created_at,
       started_at, finished_at, unique_key, worker_id, jsonb_array_length(errors) AS error_count,
       CASE WHEN jsonb_array_length(errors) > 0 THEN
           coalesce(errors -> -1 ->> 'type', 'Error') || ': ' || coalesce(errors -> -1 ->> 'message', '')
       END AS last_error,
       coalesce(scheduled_at, run_at) AS scheduled_at, snoozes, expires_at, concurrency_key, dedupe_key
FROM {schema}.jobs
WHERE state = %(state)s::{schema}.job_state
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(task)s::text IS NULL OR task = %(task)s)
ORDER BY id DESC
LIMIT %(limit)s

-- name: job_get
-- One job with its arguments, errors and result, from whichever partition holds it.
SELECT id, queue, task, state::text AS state, priority, attempt, max_attempts, run_at, created_at,
       started_at, finished_at, unique_key, worker_id, jsonb_array_length(errors) AS error_count,
       CASE WHEN jsonb_array_length(errors) > 0 THEN
           coalesce(errors -> -1 ->> 'type', 'Error') || ': ' || coalesce(errors -> -1 ->> 'message', '')
       END AS last_error,
       coalesce(scheduled_at, run_at) AS scheduled_at, snoozes, expires_at, concurrency_key, dedupe_key,
       args, errors, lease_expires_at, cancel_requested_at, result
FROM {schema}.jobs
WHERE id = %(id)s

-- name: job_state
-- A job's state, or no row.
SELECT state::text FROM {schema}.jobs WHERE id = %(id)s

-- name: job_cancel
-- Cancel a job (see cancel_job() in the migrations); NULL when there is no such job.
SELECT {schema}.cancel_job(%(id)s)::text

-- name: job_retry
-- Put a discarded or cancelled job back to available; false in any other state.
SELECT {schema}.retry_job(%(id)s)

-- name: job_retry_batch
-- Retry the next batch (by id) of one final-state partition {part}; a job whose unique_key
-- a live job holds is left (the first of several sharing a key is taken). Returns the
-- number retried, the number seen and the last id seen (NULL: no more).
WITH candidates AS (
    SELECT id, unique_key FROM {schema}.{part}
    WHERE id > %(after)s AND (%(task)s::text IS NULL OR task = %(task)s)
    ORDER BY id
    LIMIT %(batch)s
),
picked AS (
    SELECT DISTINCT ON (coalesce(c.unique_key, c.id::text)) c.id
    FROM candidates AS c
    WHERE c.unique_key IS NULL
       OR NOT EXISTS (SELECT FROM {schema}.jobs_live AS l WHERE l.unique_key = c.unique_key)
    ORDER BY coalesce(c.unique_key, c.id::text), c.id DESC
)
SELECT (SELECT count(*) FILTER (WHERE {schema}.retry_job(id)) FROM picked),
       (SELECT count(*) FROM candidates),
       (SELECT max(id) FROM candidates)

-- name: job_purge_cutoff
-- The purge cutoff (database clock minus older_than) and today's UTC date.
SELECT now() - %(older_than)s::interval, (now() AT TIME ZONE 'UTC')::date

-- name: job_purge_batch
-- Delete the next batch (by id) of rows of partition {part} finished before the cutoff.
-- Returns the number deleted and the last id seen (NULL: no more).
WITH doomed AS (
    SELECT id FROM {schema}.{part}
    WHERE finished_at < %(cutoff)s AND id > %(after)s
    ORDER BY id
    LIMIT %(batch)s
),
gone AS (
    DELETE FROM {schema}.{part}
    WHERE finished_at < %(cutoff)s AND id IN (SELECT id FROM doomed)
    RETURNING id
)
SELECT (SELECT count(*) FROM gone), (SELECT max(id) FROM doomed)

-- name: status_queues
SELECT * FROM {schema}.queue_stats ORDER BY queue

-- name: status_workers
SELECT * FROM {schema}.workers ORDER BY started_at, worker_id

-- name: status_failures
SELECT * FROM {schema}.failures ORDER BY last_seen DESC NULLS LAST LIMIT %(n)s

-- name: status_health
SELECT * FROM {schema}.health

-- name: status_retention
SELECT * FROM {schema}.retention

-- name: status_controls
-- Queues with a pause or a limit, and what the limits count now.
SELECT * FROM {schema}.queue_controls
WHERE paused OR concurrency IS NOT NULL OR key_concurrency IS NOT NULL OR rate_limit IS NOT NULL
   OR key_rate_limit IS NOT NULL
ORDER BY queue

-- name: status_task_controls
SELECT * FROM {schema}.task_controls ORDER BY task

-- name: status_clock
-- Read last in the status pipeline (one implicit transaction, so not now()): every time
-- the views returned is at or before it.
SELECT clock_timestamp() AS at

-- name: session_application_name
SELECT set_config('application_name', %(name)s, false)

-- name: demo_schema_drop
DROP SCHEMA IF EXISTS {schema} CASCADE

-- name: demo_state_counts
SELECT state::text, count(*) FROM {schema}.jobs GROUP BY 1

-- name: demo_failed_attempts
SELECT coalesce(sum(jsonb_array_length(errors)), 0) FROM {schema}.jobs
