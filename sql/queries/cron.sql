-- Cron queries, run by the scheduler loop of every worker process (pgqueue/_cron_loop.py).
-- Materialisation is one transaction: cron_lock, cron_lock_schedules, cron_fire. The
-- advisory lock key is hashtextextended('pgqueue.cron:' || schema, 0).

-- name: cron_register
-- Upsert the schedules a worker declares (at start; idempotent and safe to race: rows are
-- taken in name order). A changed cron expression or time zone moves defined_at to now,
-- so the new definition starts with the next tick and never catches up on old ones.
INSERT INTO {schema}.cron_schedules AS s
    (name, task, cron, timezone, queue, priority, args, missed, max_catchup, grace_seconds)
SELECT *
FROM unnest(%(names)s::text[], %(tasks)s::text[], %(crons)s::text[], %(timezones)s::text[],
            %(queues)s::text[], %(priorities)s::smallint[], %(args)s::jsonb[], %(missed)s::text[],
            %(max_catchup)s::int[], %(grace)s::float8[])
ORDER BY 1
ON CONFLICT (name) DO UPDATE SET
    defined_at = CASE WHEN (s.cron, s.timezone) IS DISTINCT FROM (excluded.cron, excluded.timezone)
                      THEN now() ELSE s.defined_at END,
    task = excluded.task,
    cron = excluded.cron,
    timezone = excluded.timezone,
    queue = excluded.queue,
    priority = excluded.priority,
    args = excluded.args,
    missed = excluded.missed,
    max_catchup = excluded.max_catchup,
    grace_seconds = excluded.grace_seconds,
    last_seen_at = now()
RETURNING name, last_tick, defined_at, clock_timestamp()

-- name: cron_lock
-- The materialisation lock for this transaction, and the database clock: now() (the
-- transaction's time, which ticks are computed against) and clock_timestamp().
SELECT pg_try_advisory_xact_lock(hashtextextended(%(lock_name)s, 0)), now(), clock_timestamp()

-- name: cron_lock_schedules
-- The state rows of the schedules this worker declares, locked until commit (in name
-- order, like cron_register), so that even a second transaction that got past the
-- advisory lock waits here and then reads the cursor the first one wrote.
SELECT name, last_tick, defined_at
FROM {schema}.cron_schedules
WHERE name = ANY(%(names)s::text[])
ORDER BY name
FOR UPDATE

-- name: cron_fire
-- In one statement: record each due tick in cron_ticks (its primary key (schedule, tick)
-- refuses a tick fired before, whatever became of that tick's job), insert one available
-- job per newly recorded tick (run_at = scheduled_at = the tick, unique_key
-- 'cron:<schedule>:<tick>', the task's concurrency key and deadline after the tick), advance the cursors, wake the queues' workers, and prune tick
-- history older than %(keep_days)s days (always keeping each schedule's latest tick).
WITH t AS (
    SELECT *
    FROM unnest(%(names)s::text[], %(ticks)s::timestamptz[], %(tasks)s::text[], %(queues)s::text[],
                %(priorities)s::smallint[], %(args)s::jsonb[], %(unique_keys)s::text[],
                %(concurrency_keys)s::text[], %(expires_in)s::float8[])
         AS t(schedule, tick, task, queue, priority, args, unique_key, concurrency_key, expires_in)
), fired AS (
    INSERT INTO {schema}.cron_ticks (schedule, tick, job_id, fired_by)
    SELECT schedule, tick, nextval({id_seq}), %(worker_id)s FROM t
    ORDER BY schedule, tick
    ON CONFLICT (schedule, tick) DO NOTHING
    RETURNING schedule, tick, job_id
), jobs AS (
    INSERT INTO {schema}.jobs_live
        (id, task, args, queue, priority, run_at, scheduled_at, unique_key, concurrency_key, expires_at, state)
    SELECT f.job_id, t.task, t.args, t.queue, t.priority, f.tick, f.tick, t.unique_key, t.concurrency_key,
           f.tick + make_interval(secs => t.expires_in), 'available'
    FROM fired AS f
    JOIN t ON t.schedule = f.schedule AND t.tick = f.tick
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING id, queue
), cursors AS (
    UPDATE {schema}.cron_schedules AS s
    SET last_tick = c.tick
    FROM unnest(%(cursor_names)s::text[], %(cursor_ticks)s::timestamptz[]) AS c(name, tick)
    WHERE s.name = c.name AND (s.last_tick IS NULL OR s.last_tick < c.tick)
    RETURNING s.name
), pruned AS (
    DELETE FROM {schema}.cron_ticks AS old
    WHERE old.schedule = ANY(%(cursor_names)s::text[])
      AND old.tick < now() - make_interval(days => %(keep_days)s)
      AND EXISTS (SELECT 1 FROM {schema}.cron_ticks AS newer
                  WHERE newer.schedule = old.schedule AND newer.tick > old.tick)
    RETURNING 1
), notified AS (
    SELECT pg_notify({channel}, q) FROM (SELECT DISTINCT queue FROM jobs) AS j(q)
)
SELECT f.schedule, f.tick, f.job_id,
       (SELECT count(*) FROM jobs) AS inserted,
       (SELECT count(*) FROM cursors) AS advanced,
       (SELECT count(*) FROM pruned) AS pruned,
       (SELECT count(*) FROM notified) AS notified
FROM (SELECT 1) AS one
LEFT JOIN fired AS f ON true
ORDER BY f.schedule, f.tick

-- name: cron_refresh
-- Idle refresh (about every 30 s): mark the schedules as still declared by a running
-- worker (at most one write per 10 s whatever the number of workers), and read their
-- cursors and the database clock.
WITH touched AS (
    UPDATE {schema}.cron_schedules
    SET last_seen_at = now()
    WHERE name = ANY(%(names)s::text[]) AND last_seen_at < now() - interval '10 seconds'
    RETURNING name
)
SELECT s.name, s.last_tick, s.defined_at, clock_timestamp(), (SELECT count(*) FROM touched)
FROM {schema}.cron_schedules AS s
WHERE s.name = ANY(%(names)s::text[])

-- name: cron_status_list
-- Every schedule the database knows, for `pgqueue cron list`.
SELECT name, task, cron, timezone, queue, priority, missed, max_catchup, grace_seconds, active,
       last_seen_at, defined_at, last_tick, last_fired_tick, last_fired_at, last_fired_by,
       last_job_id, last_job_state::text, now()
FROM {schema}.cron_status
ORDER BY name
