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
--   expiry:    waiting jobs (available/scheduled/retryable) whose deadline (expires_at)
--              passed become cancelled with a pgqueue.Expired error entry: no attempt
--              may start after it (the claims skip them meanwhile). A job the scheduler
--              promotes in the same tick is left to the next (a statement changes a row
--              once); a running job is never touched (a retry it asks for after the
--              deadline expires at the next tick).
-- Only timers at or after %(since)s are scanned (NULL: all): the caller passes a watermark
-- a little before its previous complete tick, so that timer entries left behind by
-- finished jobs (dead, and not removable while an old snapshot is held) are not walked
-- again every second; it passes NULL now and then to catch stragglers.
-- Returns (leader, promoted, rescued, discarded, notified, now, expired); notified counts
-- the queue wake-ups and the results channel's NOTIFY.
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
         created_at, started_at, finished_at, worker_id, errors, concurrency_key, expires_at, snoozes, dedupe_key,
         waiting_on, has_children, workflow_id)
    SELECT id, queue, task, args, 'discarded', priority, run_at, coalesce(scheduled_at, run_at), attempt,
           max_attempts, unique_key, created_at, started_at, now(), worker_id,
           errors || jsonb_build_array(jsonb_build_object(
               'attempt', attempt, 'type', 'LeaseExpired',
               'message', 'lease expired on the last attempt: the worker crashed, hung or lost its connection',
               'worker', worker_id, 'at', now())),
           concurrency_key, expires_at, snoozes, dedupe_key, waiting_on, has_children, workflow_id
    FROM dead
    RETURNING id
), past_deadline AS (
    -- Expiry, through the partial index jobs_live_expires (only jobs with a deadline).
    SELECT j.id
    FROM {schema}.jobs_live AS j
    WHERE j.expires_at <= now() AND j.state IN ('available', 'scheduled', 'retryable')
      AND j.expires_at >= coalesce(%(since)s::timestamptz, '-infinity')
      AND (SELECT ok FROM leader)
      AND NOT EXISTS (SELECT FROM due WHERE due.id = j.id)
    ORDER BY j.expires_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
), deadline_gone AS (
    DELETE FROM {schema}.jobs_live AS j
    USING past_deadline AS x
    WHERE j.id = x.id
    RETURNING j.*
), expired_jobs AS (
    INSERT INTO {schema}.jobs
        (id, queue, task, args, state, priority, run_at, scheduled_at, attempt, max_attempts, unique_key,
         created_at, started_at, finished_at, worker_id, errors, concurrency_key, expires_at, snoozes, dedupe_key,
         waiting_on, has_children, workflow_id)
    SELECT id, queue, task, args, 'cancelled', priority, CASE WHEN waiting_on > 0 THEN scheduled_at ELSE run_at END,
           coalesce(scheduled_at, run_at), attempt,
           max_attempts, unique_key, created_at, started_at, now(), worker_id,
           errors || jsonb_build_array(jsonb_build_object(
               'attempt', attempt, 'type', 'pgqueue.Expired',
               'message', 'expired: not started by its deadline ' || to_char(expires_at AT TIME ZONE 'UTC',
                                                                             'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
               'at', now())),
           concurrency_key, expires_at, snoozes, dedupe_key, waiting_on, has_children, workflow_id
    FROM deadline_gone
    RETURNING id
), dependents AS (
    -- Workflows: dependents of the jobs discarded or expired here are settled by this
    -- statement (settle_dependents(), migration 0011); only jobs with has_children get there.
    SELECT {schema}.settle_dependents(array_agg(f.id ORDER BY f.id), array_agg(f.state ORDER BY f.id)) AS n
    FROM (SELECT id, 'discarded'::{schema}.job_state AS state FROM dead WHERE has_children
          UNION ALL
          SELECT id, 'cancelled'::{schema}.job_state FROM deadline_gone WHERE has_children) AS f
    HAVING count(*) > 0
), notified AS (
    SELECT pg_notify({channel}, q) FROM (SELECT DISTINCT queue FROM promoted) AS p(q)
), results_woken AS (
    -- Results: one NOTIFY on the results channel if a job discarded or expired here was
    -- awaited (the flag as read from the row this statement locked and deleted).
    SELECT 1
    FROM (SELECT FROM dead WHERE awaited UNION ALL SELECT FROM deadline_gone WHERE awaited LIMIT 1) AS w
    WHERE pg_notify({results_channel}, '') IS NOT NULL
)
SELECT (SELECT ok FROM leader) AS leader,
       (SELECT count(*) FROM promoted) AS promoted,
       (SELECT count(*) FROM rescued) AS rescued,
       (SELECT count(*) FROM discarded) AS discarded,
       -- "dependents" is referenced here so that it runs (its count is not reported).
       (SELECT count(*) FROM notified) + (SELECT count(*) FROM results_woken)
           + 0 * coalesce((SELECT n FROM dependents), 0) AS notified,
       now() AS now,
       (SELECT count(*) FROM expired_jobs) AS expired

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

-- name: unique_keys_prune
-- Retention of the unique ledger, one batch: of the next %(batch)s rows in key order after
-- %(after)s, remove those that hold nothing any more, i.e. whose period is over, or whose
-- holder left the live partition while only live states hold the key, or (held since
-- before %(kept_since)s, the oldest finished_at retention still keeps; NULL: skip) whose
-- holder is neither live nor kept finished. A row an enqueue changed meanwhile (a new
-- holder) is left: the DELETE re-checks job_id. Returns how many were removed and the last
-- key looked at (NULL: no more rows).
WITH batch AS (
    SELECT u.key, u.job_id, u.states, u.held_since, u.held_until
    FROM {schema}.unique_keys AS u
    WHERE u.key > %(after)s
    ORDER BY u.key
    LIMIT %(batch)s
), candidates AS (
    SELECT b.key, b.job_id
    FROM batch AS b
    WHERE b.held_until <= now()
       OR (NOT EXISTS (SELECT FROM {schema}.jobs_live AS j WHERE j.id = b.job_id)
           AND (NOT (b.states && ARRAY['completed', 'discarded', 'cancelled']::{schema}.job_state[])
                OR (b.held_since < %(kept_since)s::timestamptz
                    AND NOT EXISTS (SELECT FROM {schema}.jobs AS f
                                    WHERE f.id = b.job_id AND f.state IN ('completed', 'discarded', 'cancelled')
                                      AND f.finished_at >= b.held_since))))
), gone AS (
    DELETE FROM {schema}.unique_keys AS u
    USING candidates AS c
    WHERE u.key = c.key AND u.job_id = c.job_id
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT max(key) FROM batch)
