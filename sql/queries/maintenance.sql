-- Maintenance queries, run by every worker process; the leader of the moment is the
-- process that wins a transaction-scoped advisory lock on a key namespaced to the schema
-- (hashtextextended('pgqueue.maintenance:' || schema, 0)), so leadership needs no table,
-- survives poolers in transaction mode and moves freely between nodes.

-- name: maintenance_tick
-- In one statement, if this process wins the lock:
--   scheduler: scheduled/retryable jobs that are due become available (and wake workers);
--              each state is its own range of the timers index (state, timer), read in
--              timer order, at most %(batch)s of each per tick;
--   rescuer:   running jobs whose lease expired become retryable with backoff, or
--              discarded when out of attempts; each gets an error entry saying why.
--              scheduled_at keeps the time first scheduled for (pinned from the old
--              run_at where it was never set).
-- Only timers at or after %(since)s are scanned (NULL: all): the caller passes a watermark
-- a little before its previous complete tick, so that timer entries left behind by
-- finished jobs (dead, and not removable while an old snapshot is held) are not walked
-- again every second; it passes NULL now and then to catch stragglers.
-- Returns (leader, promoted, rescued, discarded, notified, now).
WITH leader AS (
    SELECT pg_try_advisory_xact_lock(hashtextextended(%(lock_name)s, 0)) AS ok
), due_scheduled AS (
    SELECT id
    FROM {schema}.jobs_live
    WHERE state = 'scheduled'
      AND (CASE WHEN state = 'running' THEN lease_expires_at ELSE run_at END) <= now()
      AND (CASE WHEN state = 'running' THEN lease_expires_at ELSE run_at END)
          >= coalesce(%(since)s::timestamptz, '-infinity')
      AND (SELECT ok FROM leader)
    ORDER BY (CASE WHEN state = 'running' THEN lease_expires_at ELSE run_at END)
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
), due_retryable AS (
    SELECT id
    FROM {schema}.jobs_live
    WHERE state = 'retryable'
      AND (CASE WHEN state = 'running' THEN lease_expires_at ELSE run_at END) <= now()
      AND (CASE WHEN state = 'running' THEN lease_expires_at ELSE run_at END)
          >= coalesce(%(since)s::timestamptz, '-infinity')
      AND (SELECT ok FROM leader)
    ORDER BY (CASE WHEN state = 'running' THEN lease_expires_at ELSE run_at END)
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
), due AS (
    SELECT id FROM due_scheduled UNION ALL SELECT id FROM due_retryable
), promoted AS (
    UPDATE {schema}.jobs_live AS j
    SET state = 'available'
    FROM due
    WHERE j.id = due.id
    RETURNING j.queue
), expired AS (
    SELECT id
    FROM {schema}.jobs_live
    WHERE state = 'running'
      AND (CASE WHEN state = 'running' THEN lease_expires_at ELSE run_at END) < now()
      AND (CASE WHEN state = 'running' THEN lease_expires_at ELSE run_at END)
          >= coalesce(%(since)s::timestamptz, '-infinity')
      AND (SELECT ok FROM leader)
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
), rescued AS (
    UPDATE {schema}.jobs_live AS j
    SET state = 'retryable',
        run_at = now() + make_interval(secs => random() * least(
            %(backoff_cap)s::float8, %(backoff_base)s::float8 * power(2.0, j.attempt - 1))),
        scheduled_at = coalesce(j.scheduled_at, j.run_at),
        lease_token = NULL,
        lease_expires_at = NULL,
        errors = j.errors || jsonb_build_array(jsonb_build_object(
            'attempt', j.attempt, 'type', 'LeaseExpired',
            'message', 'lease expired: the worker crashed, hung or lost its connection',
            'worker', j.worker_id, 'at', now()))
    FROM expired
    WHERE j.id = expired.id AND j.attempt < coalesce(j.max_attempts, %(default_max_attempts)s)
    RETURNING j.id
), dead AS (
    DELETE FROM {schema}.jobs_live AS j
    USING expired
    WHERE j.id = expired.id AND j.attempt >= coalesce(j.max_attempts, %(default_max_attempts)s)
    RETURNING j.*
), discarded AS (
    INSERT INTO {schema}.jobs
        (id, queue, task, args, state, priority, run_at, scheduled_at, attempt, max_attempts, unique_key,
         created_at, started_at, finished_at, worker_id, errors)
    SELECT id, queue, task, args, 'discarded', priority, run_at, coalesce(scheduled_at, run_at), attempt,
           max_attempts, unique_key, created_at, started_at, now(), worker_id,
           errors || jsonb_build_array(jsonb_build_object(
               'attempt', attempt, 'type', 'LeaseExpired',
               'message', 'lease expired on the last attempt: the worker crashed, hung or lost its connection',
               'worker', worker_id, 'at', now()))
    FROM dead
    RETURNING id
), notified AS (
    SELECT pg_notify({channel}, q) FROM (SELECT DISTINCT queue FROM promoted) AS p(q)
)
SELECT (SELECT ok FROM leader) AS leader,
       (SELECT count(*) FROM promoted) AS promoted,
       (SELECT count(*) FROM rescued) AS rescued,
       (SELECT count(*) FROM discarded) AS discarded,
       (SELECT count(*) FROM notified) AS notified,
       now() AS now

-- name: live_dead_tuples
-- Dead and live row versions of the live partition (cumulative statistics), and whether
-- this session may VACUUM it (the owner; from PostgreSQL 17 also the MAINTAIN privilege):
-- without that right PostgreSQL skips the VACUUM with a mere warning.
-- Last, the age in seconds of the oldest snapshot another session of this database holds
-- (0 if none): dead rows younger than it cannot be removed.
SELECT coalesce(s.n_dead_tup, 0), coalesce(s.n_live_tup, 0),
       CASE WHEN current_setting('server_version_num')::int >= 170000
            THEN has_table_privilege(c.oid, 'MAINTAIN')
            ELSE pg_has_role(c.relowner, 'USAGE') END,
       (SELECT coalesce(max(extract(epoch FROM now() - a.xact_start)), 0)::float8
        FROM pg_stat_activity AS a
        WHERE a.backend_xmin IS NOT NULL AND a.pid <> pg_backend_pid()
          AND a.datname = current_database()),
       coalesce(s.n_mod_since_analyze, 0)
FROM pg_stat_user_tables AS s
JOIN pg_class AS c ON c.oid = s.relid
WHERE s.relid = to_regclass(%(table)s)

-- name: oldest_snapshot
-- The session holding the oldest snapshot (what keeps VACUUM from removing dead rows):
-- pid, application name and how long its transaction has been open, in seconds.
SELECT pid, application_name, extract(epoch FROM now() - xact_start)::float8
FROM pg_stat_activity
WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
  AND datname = current_database()  -- other databases' snapshots do not pin our rows
ORDER BY age(backend_xmin) DESC
LIMIT 1

-- name: vacuum_lock
-- Session-level: only one process vacuums the live partition at a time.
SELECT pg_try_advisory_lock(hashtextextended(%(lock_name)s, 0))

-- name: vacuum_unlock
SELECT pg_advisory_unlock(hashtextextended(%(lock_name)s, 0))

-- name: analyze_live
-- The claim's plan depends on the live partition's statistics: planned as nearly empty
-- while a backlog builds, it would read every waiting job's index entry and sort them on
-- every claim instead of walking the index in order.
ANALYZE {schema}.jobs_live

-- name: vacuum_live
-- The live partition churns: every job is inserted, updated and deleted there. Vacuuming
-- it ourselves keeps claims fast even where autovacuum is off or slow to come round.
VACUUM (ANALYZE) {schema}.jobs_live
