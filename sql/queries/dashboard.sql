-- The web dashboard's reads and actions (pgqueue.dashboard), run by pgqueue._db.dashboard
-- only. Its other pages read the views through pgqueue.ops.

-- name: dash_overview
-- Everything the overview shows, in one statement (one round trip per live refresh): the
-- database clock, every queue's row as the queue_stats view computes it, the paused
-- queues, and finished jobs per queue and minute over the last %(minutes)s whole minutes
-- and the current one (ago: 0 is the current minute).
-- It reads what queue_stats reads, but each relation once: jobs_live once (depths, lag
-- and failed attempts together) and the finished partitions once, over the wider of the
-- chart's window and queue_stats' 15 minutes, counting the view's 1/5/15-minute windows
-- and the chart's minutes in the same pass. The finished partitions outside that window
-- are pruned on now() at start; inside it the BRIN indexes find the rows.
-- tests/integration/test_dashboard_reads.py checks that its rows equal the view's.
WITH minutes AS MATERIALIZED (
    SELECT queue,
           (extract(epoch FROM date_trunc('minute', now()) - date_trunc('minute', finished_at)) / 60)::int
               AS ago,
           count(*) FILTER (WHERE state = 'completed') AS completed,
           count(*) FILTER (WHERE state = 'discarded') AS discarded,
           count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
           count(*) FILTER (WHERE state = 'completed' AND finished_at >= now() - interval '1 minute') AS c1,
           count(*) FILTER (WHERE state = 'completed' AND finished_at >= now() - interval '5 minutes') AS c5,
           count(*) FILTER (WHERE state = 'completed' AND finished_at >= now() - interval '15 minutes') AS c15,
           count(*) FILTER (WHERE state = 'discarded' AND finished_at >= now() - interval '1 minute') AS d1,
           count(*) FILTER (WHERE state = 'discarded' AND finished_at >= now() - interval '5 minutes') AS d5,
           count(*) FILTER (WHERE state = 'discarded' AND finished_at >= now() - interval '15 minutes') AS d15,
           count(*) FILTER (WHERE state = 'cancelled' AND finished_at >= now() - interval '1 minute') AS x1,
           count(*) FILTER (WHERE state = 'cancelled' AND finished_at >= now() - interval '5 minutes') AS x5,
           count(*) FILTER (WHERE state = 'cancelled' AND finished_at >= now() - interval '15 minutes') AS x15,
           count(*) FILTER (WHERE state = 'cancelled' AND finished_at >= now() - interval '15 minutes'
                            AND errors -> -1 ->> 'type' = 'pgqueue.Expired') AS e15,
           -- Failed attempts of the last 5 minutes in jobs that finished in them (errors
           -- are recorded before a job finishes; cancelled jobs are not counted).
           coalesce(sum((SELECT count(*) FROM jsonb_array_elements(errors) AS e(err)
                          WHERE (e.err ->> 'at')::timestamptz >= now() - interval '5 minutes'))
                    FILTER (WHERE state IN ('completed', 'discarded')
                            AND finished_at >= now() - interval '5 minutes' AND errors <> '[]'::jsonb), 0) AS f5
    FROM {schema}.jobs
    WHERE state IN ('completed', 'discarded', 'cancelled')
      AND finished_at >= least(date_trunc('minute', now()) - make_interval(mins => %(minutes)s),
                               now() - interval '15 minutes')
      AND finished_at < now() + interval '1 hour'
    GROUP BY 1, 2
), live AS (
    SELECT queue,
           count(*) FILTER (WHERE state = 'available') AS available,
           count(*) FILTER (WHERE state = 'scheduled') AS scheduled,
           count(*) FILTER (WHERE state = 'running') AS running,
           count(*) FILTER (WHERE state = 'retryable') AS retryable,
           min(run_at) FILTER (WHERE state = 'available') AS oldest_available,
           coalesce(sum((SELECT count(*) FROM jsonb_array_elements(errors) AS e(err)
                          WHERE (e.err ->> 'at')::timestamptz >= now() - interval '5 minutes'))
                    FILTER (WHERE errors <> '[]'::jsonb), 0) AS f5
    FROM {schema}.jobs_live
    GROUP BY queue
), finished AS (
    -- queue_stats shows a queue with no live job only if jobs finished in its 15 minutes.
    SELECT queue, sum(c1) AS c1, sum(c5) AS c5, sum(c15) AS c15, sum(d1) AS d1, sum(d5) AS d5,
           sum(d15) AS d15, sum(x1) AS x1, sum(x5) AS x5, sum(x15) AS x15, sum(e15) AS e15, sum(f5) AS f5
    FROM minutes
    GROUP BY queue
    HAVING sum(c15 + d15 + x15) > 0
), merged AS (
    SELECT coalesce(l.queue, f.queue) AS queue,
           coalesce(l.available, 0) AS available,
           coalesce(l.scheduled, 0) AS scheduled,
           coalesce(l.running, 0) AS running,
           coalesce(l.retryable, 0) AS retryable,
           coalesce(greatest(extract(epoch FROM now() - l.oldest_available)::float8, 0), 0) AS lag_seconds,
           coalesce(f.c1, 0) AS completed_1m,
           coalesce(f.c5, 0) AS completed_5m,
           coalesce(f.c15, 0) AS completed_15m,
           coalesce(f.d1, 0) AS discarded_1m,
           coalesce(f.d5, 0) AS discarded_5m,
           coalesce(f.d15, 0) AS discarded_15m,
           coalesce(l.f5, 0) + coalesce(f.f5, 0) AS failed_attempts_5m,
           coalesce(f.x1, 0) AS cancelled_1m,
           coalesce(f.x5, 0) AS cancelled_5m,
           coalesce(f.x15, 0) AS cancelled_15m,
           coalesce(f.e15, 0) AS expired_15m
    FROM live AS l
    FULL JOIN finished AS f ON f.queue = l.queue
)
SELECT now() AS at,
       (SELECT coalesce(jsonb_agg(to_jsonb(m) || jsonb_build_object('failure_rate_5m',
                  CASE WHEN m.failed_attempts_5m + m.completed_5m = 0 THEN 0::float8
                       ELSE m.failed_attempts_5m::float8 / (m.failed_attempts_5m + m.completed_5m) END)
                  ORDER BY m.queue), '[]'::jsonb)
        FROM merged AS m) AS queues,
       (SELECT coalesce(jsonb_agg(c.queue ORDER BY c.queue), '[]'::jsonb)
        FROM {schema}.queue_controls AS c WHERE c.paused) AS paused,
       (SELECT coalesce(jsonb_agg(jsonb_build_object('queue', queue, 'ago', ago, 'completed', completed,
                                                     'discarded', discarded, 'cancelled', cancelled)), '[]'::jsonb)
        FROM minutes
        WHERE ago <= %(minutes)s) AS series

-- name: dash_failures
-- The failures page: failed jobs grouped by task and the type of their latest error, as
-- the failures view groups them, but over a bounded window, so that the page costs the
-- same however many jobs failed (the view reads every failure of the last 24 hours):
--   * the %(window)s newest (by id) live jobs that failed at least once, and
--   * the %(window)s newest jobs that were discarded or cancelled in the last 24 hours, of
--     which the discarded ones and those cancelled as expired (pgqueue.Expired) failed.
-- Each part walks id indexes backwards and stops at its window's end (the second reads no
-- more than %(window)s rows: it filters after the limit, so a day of jobs cancelled by
-- hand is never walked through); the finished partitions outside the 24 hours are pruned
-- on now() at start. Every row carries window_live and window_finished, how many jobs
-- each part looked at (with no failure, one row of NULL group columns carries them); a
-- part that looked at %(window)s jobs left older ones out. last_seen is the latest error's time in the group, last_message and
-- last_job_id that error's (the newest job among ties); the %(groups)s latest groups.
WITH recent AS MATERIALIZED (
    (SELECT id, task, errors -> -1 AS err, true AS live, true AS failed
     FROM {schema}.jobs_live
     WHERE errors <> '[]'::jsonb
     ORDER BY id DESC
     LIMIT %(window)s)
    UNION ALL
    SELECT id, task, errors -> -1 AS err, false AS live,
           errors <> '[]'::jsonb AND (state = 'discarded' OR errors -> -1 ->> 'type' = 'pgqueue.Expired') AS failed
    FROM (
        SELECT id, task, state, errors
        FROM {schema}.jobs
        WHERE state IN ('discarded', 'cancelled')
          AND finished_at >= now() - interval '24 hours' AND finished_at < now() + interval '1 hour'
        ORDER BY id DESC
        LIMIT %(window)s
    ) AS finished
), flat AS MATERIALIZED (
    SELECT id, task, coalesce(err ->> 'type', 'unknown') AS error_type, (err ->> 'at')::timestamptz AS at
    FROM recent
    WHERE failed
), grouped AS (
    SELECT task, error_type, count(*) AS count, max(at) AS last_seen
    FROM flat
    GROUP BY task, error_type
), latest AS (
    -- The latest error of each group: a hash join on (task, type, time), no sort of the window.
    SELECT DISTINCT ON (g.task, g.error_type)
           g.task, g.error_type, g.count, g.last_seen, f.id AS last_job_id
    FROM grouped AS g
    LEFT JOIN flat AS f ON f.task = g.task AND f.error_type = g.error_type AND f.at = g.last_seen
    ORDER BY g.task, g.error_type, f.id DESC
)
SELECT w.window_live, w.window_finished,
       l.task, l.error_type, l.count, l.last_seen, r.err ->> 'message' AS last_message, l.last_job_id
FROM (SELECT count(*) FILTER (WHERE live) AS window_live, count(*) FILTER (WHERE NOT live) AS window_finished
      FROM recent) AS w
LEFT JOIN latest AS l ON true
LEFT JOIN recent AS r ON r.id = l.last_job_id
ORDER BY l.last_seen DESC NULLS LAST, l.task, l.error_type
LIMIT %(groups)s

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

-- name: dash_session_serial
-- No parallel workers for the dashboard's statements: each reads a bounded window, where
-- starting workers costs more than it saves, and takes CPU the job workers need.
SELECT set_config('max_parallel_workers_per_gather', '0', false)

-- name: dash_session_role
-- Read-only mode: act as the inspector role for the rest of the session, so that
-- PostgreSQL itself refuses every write.
SELECT set_config('role', %(role)s, false)
