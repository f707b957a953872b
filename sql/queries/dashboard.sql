-- The web dashboard's reads and actions (pgqueue.dashboard), run by pgqueue._db.dashboard
-- only. Its other pages read the views through pgqueue.ops.

-- name: dash_overview
-- Everything the overview shows, in one statement (one round trip per live refresh): the
-- database clock, every queue's row of queue_stats, the paused queues, and finished jobs
-- per queue and minute over the last %(minutes)s whole minutes and the current one (ago:
-- 0 is the current minute). The series reads only the finished partitions its window
-- overlaps (pruned on now() at start), through their BRIN indexes.
SELECT now() AS at,
       (SELECT coalesce(jsonb_agg(to_jsonb(s) ORDER BY s.queue), '[]'::jsonb)
        FROM {schema}.queue_stats AS s) AS queues,
       (SELECT coalesce(jsonb_agg(c.queue ORDER BY c.queue), '[]'::jsonb)
        FROM {schema}.queue_controls AS c WHERE c.paused) AS paused,
       (SELECT coalesce(jsonb_agg(to_jsonb(x)), '[]'::jsonb)
        FROM (
            SELECT queue,
                   (extract(epoch FROM date_trunc('minute', now()) - date_trunc('minute', finished_at)) / 60)::int
                       AS ago,
                   count(*) FILTER (WHERE state = 'completed') AS completed,
                   count(*) FILTER (WHERE state = 'discarded') AS discarded,
                   count(*) FILTER (WHERE state = 'cancelled') AS cancelled
            FROM {schema}.jobs
            WHERE state IN ('completed', 'discarded', 'cancelled')
              AND finished_at >= date_trunc('minute', now()) - make_interval(mins => %(minutes)s)
              AND finished_at < now() + interval '1 hour'
            GROUP BY 1, 2
        ) AS x) AS series

-- name: dash_queue_names
-- Every queue with live jobs, for the queue controls page (the live partition is small by
-- design; finished partitions are not read).
SELECT DISTINCT queue FROM {schema}.jobs_live ORDER BY queue

-- fragment: dash_job_columns
SELECT id, queue, task, state::text AS state, priority, attempt, max_attempts, run_at, created_at,
       started_at, finished_at, unique_key, worker_id, jsonb_array_length(errors) AS error_count,
       CASE WHEN jsonb_array_length(errors) > 0 THEN
           coalesce(errors -> -1 ->> 'type', 'Error') || ': ' || coalesce(errors -> -1 ->> 'message', '')
       END AS last_error,
       coalesce(scheduled_at, run_at) AS scheduled_at, snoozes, expires_at, concurrency_key, dedupe_key

-- fragment: dash_job_filters
-- queue and task match exactly; text is an ILIKE pattern matched against the errors and,
-- for the tasks whose arguments may be shown (%(args_tasks)s, NULL: every task), the args;
-- created_at within [created_from, created_to).
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(task)s::text IS NULL OR task = %(task)s)
  AND (%(text)s::text IS NULL
       OR errors::text ILIKE %(text)s
       OR ((%(args_tasks)s::text[] IS NULL OR task = ANY(%(args_tasks)s::text[])) AND args::text ILIKE %(text)s))
  AND (%(created_from)s::timestamptz IS NULL OR created_at >= %(created_from)s)
  AND (%(created_to)s::timestamptz IS NULL OR created_at < %(created_to)s)

-- name: dash_job_page
-- One page of jobs below id %(before)s (newest first) matching the filters, looking at no
-- more than the %(scan)s jobs below that id, so a page costs the same whatever the table's
-- size or a filter's rarity. Every row carries how far the scan went (scanned_to: the
-- lowest id looked at, NULL: nothing left) and how many it looked at; with no match there
-- is one row of NULL job columns carrying them. The next page starts below scanned_to
-- when the page has fewer than %(limit)s jobs, else below its last job.
WITH scanned AS MATERIALIZED (
    SELECT id FROM {schema}.jobs WHERE id < %(before)s ORDER BY id DESC LIMIT %(scan)s
), bounds AS (
    SELECT min(id) AS scanned_to, count(*) AS scanned FROM scanned
), hits AS (
    -- include: dash_job_columns
    FROM {schema}.jobs
    WHERE id < %(before)s AND id >= (SELECT scanned_to FROM bounds)
    -- include: dash_job_filters
    ORDER BY id DESC
    LIMIT %(limit)s
)
SELECT b.scanned_to, b.scanned, h.*
FROM bounds AS b LEFT JOIN hits AS h ON true
ORDER BY h.id DESC

-- name: dash_job_page_in_state
-- dash_job_page within one state: that state's partition(s) alone are read.
WITH scanned AS MATERIALIZED (
    SELECT id FROM {schema}.jobs
    WHERE state = %(state)s::{schema}.job_state AND id < %(before)s
    ORDER BY id DESC LIMIT %(scan)s
), bounds AS (
    SELECT min(id) AS scanned_to, count(*) AS scanned FROM scanned
), hits AS (
    -- include: dash_job_columns
    FROM {schema}.jobs
    WHERE state = %(state)s::{schema}.job_state AND id < %(before)s AND id >= (SELECT scanned_to FROM bounds)
    -- include: dash_job_filters
    ORDER BY id DESC
    LIMIT %(limit)s
)
SELECT b.scanned_to, b.scanned, h.*
FROM bounds AS b LEFT JOIN hits AS h ON true
ORDER BY h.id DESC

-- name: dash_job_cron_tick
-- The cron tick that enqueued a job, if one did.
SELECT schedule, tick, fired_at, fired_by FROM {schema}.cron_ticks WHERE job_id = %(id)s

-- name: dash_jobs_cancel
-- Cancel these jobs (see cancel_job()): each id with its state afterwards (no row: no
-- such job).
SELECT c.id, c.state::text
FROM unnest(%(ids)s::bigint[]) AS i(id),
     LATERAL (SELECT i.id, {schema}.cancel_job(i.id) AS state) AS c
WHERE c.state IS NOT NULL

-- name: dash_jobs_retry
-- Put these discarded or cancelled jobs back to available (attempts start over); a job
-- whose unique_key a live job holds stays as it is, and of several sharing a key the
-- newest is taken. Returns the ids retried.
WITH candidates AS (
    SELECT id, unique_key FROM {schema}.jobs
    WHERE id = ANY(%(ids)s::bigint[]) AND state IN ('discarded', 'cancelled')
),
picked AS (
    SELECT DISTINCT ON (coalesce(c.unique_key, c.id::text)) c.id
    FROM candidates AS c
    WHERE c.unique_key IS NULL
       OR NOT EXISTS (SELECT FROM {schema}.jobs_live AS l WHERE l.unique_key = c.unique_key)
    ORDER BY coalesce(c.unique_key, c.id::text), c.id DESC
)
SELECT id FROM picked WHERE {schema}.retry_job(id)

-- name: dash_jobs_delete
-- Delete these jobs if they are finished (completed, discarded, cancelled); live jobs are
-- never deleted (cancel them first). Returns the ids deleted.
DELETE FROM {schema}.jobs
WHERE id = ANY(%(ids)s::bigint[]) AND state IN ('completed', 'discarded', 'cancelled')
RETURNING id

-- name: dash_session_role
-- Read-only mode: act as the inspector role for the rest of the session, so that
-- PostgreSQL itself refuses every write.
SELECT set_config('role', %(role)s, false)
