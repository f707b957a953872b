-- Queries of pgqueue.testing: helpers for users' tests, run against a test database only.
-- They claim one job at a time in the caller's process, look at waiting jobs and move the
-- test's clock (the waiting jobs' timers), never anything a worker depends on.

-- name: testing_claim_next
-- Claim the next due available job of %(queues)s (every queue when NULL) whose task is one
-- of %(tasks)s, in the workers' claim order, under a fresh lease (flow control is not
-- applied: the caller runs one job at a time). A job past its deadline is skipped.
WITH picked AS (
    SELECT id, now() AS started_at
    FROM {schema}.jobs_live
    WHERE state = 'available' AND task = ANY(%(tasks)s::text[])
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
      AND (expires_at IS NULL OR expires_at > now())
    ORDER BY (-priority::integer), run_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
-- include: claim_picked

-- name: testing_claim_job
-- Claim job %(id)s now, whatever its timer (available, scheduled or retryable), under a
-- fresh lease; no row when it does not exist (its transaction rolled back) or is not waiting.
WITH picked AS (
    SELECT id, now() AS started_at
    FROM {schema}.jobs_live
    WHERE id = %(id)s AND state IN ('available', 'scheduled', 'retryable')
    FOR UPDATE
)
-- include: claim_picked

-- name: testing_waiting_jobs
-- Waiting jobs (available, scheduled, retryable) in id order, filtered by task and queue
-- (NULL: any).
SELECT id, task, queue, args, state::text, priority, run_at, attempt, max_attempts, unique_key
FROM {schema}.jobs_live
WHERE state IN ('available', 'scheduled', 'retryable')
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
ORDER BY id

-- name: testing_next_timer
-- Seconds until the first scheduled or retryable job of %(queues)s (NULL: every queue)
-- whose task is one of %(tasks)s becomes due (0 when one is due already); NULL when none waits.
SELECT CASE WHEN min(run_at) IS NOT NULL THEN greatest(extract(epoch FROM min(run_at) - now()), 0) END::float8
FROM {schema}.jobs_live
WHERE state IN ('scheduled', 'retryable') AND task = ANY(%(tasks)s::text[])
  AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))

-- name: testing_advance
-- Move the test's clock %(seconds)s forward for the waiting jobs of %(queues)s (NULL: all):
-- their run_at, scheduled_at and deadline come that much earlier, and those now due
-- become available (what the scheduler would do once that time had passed). Returns the
-- number of jobs that became available.
WITH moved AS (
    UPDATE {schema}.jobs_live
    SET run_at = run_at - make_interval(secs => %(seconds)s::float8),
        scheduled_at = scheduled_at - make_interval(secs => %(seconds)s::float8),
        expires_at = expires_at - make_interval(secs => %(seconds)s::float8),
        state = CASE WHEN state <> 'available' AND run_at - make_interval(secs => %(seconds)s::float8) <= now()
                     THEN 'available' ELSE state END
    WHERE state IN ('available', 'scheduled', 'retryable')
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
    RETURNING state
)
SELECT count(*) FILTER (WHERE state = 'available') FROM moved

-- name: testing_create_database
-- A new database cloned from a template (names validated and quoted by the caller's
-- identifiers).
CREATE DATABASE {name} TEMPLATE {template}

-- name: testing_drop_database
DROP DATABASE IF EXISTS {name} WITH (FORCE)
