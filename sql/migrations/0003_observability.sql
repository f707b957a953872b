-- pgqueue schema, version 3: observability and operations.
--
--   * jobs.cancel_requested_at: an operator asked a running job to stop (cancel_job()).
--   * worker_registry (table) + workers (view): the worker processes and their heartbeat.
--   * settings: values the workers applied that operators want to see (retention).
--   * views queue_stats, failures, health, retention: read-only, cheap inspection.
--   * functions cancel_job(id), retry_job(id).
--
-- Every view reads the live partition (small by design) and, for the finished jobs, only
-- the day partitions a time window can touch: the windows bound finished_at on both sides
-- with now() (the upper bound, an hour ahead, keeps the empty partitions created ahead
-- out), which prunes the other days at executor start and lets the BRIN index on
-- finished_at narrow the scan inside today's partition.

-- A nullable column without default: a catalog-only change, no table rewrite. It is
-- inherited by every partition, and by the day partitions created later (LIKE the parent).
ALTER TABLE {schema}.jobs ADD COLUMN cancel_requested_at timestamptz;
COMMENT ON COLUMN {schema}.jobs.cancel_requested_at IS
    'When an operator asked this running job to stop (cancel_job()); the worker holding it learns it at its next heartbeat.';

-- -- worker registry ----------------------------------------------------------------------

CREATE TABLE {schema}.worker_registry (
    worker_id          text        PRIMARY KEY,
    host               text        NOT NULL,
    pid                integer     NOT NULL,
    queues             text[]      NOT NULL,
    concurrency        integer     NOT NULL,
    in_flight          integer     NOT NULL DEFAULT 0,
    started_at         timestamptz NOT NULL DEFAULT now(),
    last_heartbeat     timestamptz NOT NULL DEFAULT now(),
    expires_at         timestamptz NOT NULL,
    listener_connected boolean     NOT NULL DEFAULT false,
    version            text        NOT NULL
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 200);

COMMENT ON TABLE {schema}.worker_registry IS
    'One row per worker process: upserted at start and at every heartbeat, deleted on graceful stop; rows expired for more than 5 minutes are removed by maintenance. Read it through the workers view.';

CREATE VIEW {schema}.workers AS
SELECT worker_id, host, pid, queues, concurrency, in_flight, started_at, last_heartbeat,
       listener_connected, version, expires_at,
       expires_at > now() AS alive
FROM {schema}.worker_registry;

COMMENT ON VIEW {schema}.workers IS 'Worker processes that registered recently, alive or not yet cleaned up.';
COMMENT ON COLUMN {schema}.workers.worker_id IS 'The worker''s id (host:pid:random), also stored in jobs.worker_id of the jobs it claims.';
COMMENT ON COLUMN {schema}.workers.host IS 'Host name of the worker process.';
COMMENT ON COLUMN {schema}.workers.pid IS 'Operating-system process id on that host.';
COMMENT ON COLUMN {schema}.workers.queues IS 'Queues the worker claims from.';
COMMENT ON COLUMN {schema}.workers.concurrency IS 'Jobs the worker runs at once at most.';
COMMENT ON COLUMN {schema}.workers.in_flight IS 'Jobs running in the worker at its last heartbeat.';
COMMENT ON COLUMN {schema}.workers.started_at IS 'When the worker registered (database clock).';
COMMENT ON COLUMN {schema}.workers.last_heartbeat IS 'When the worker last reported (database clock); every heartbeat_interval seconds.';
COMMENT ON COLUMN {schema}.workers.listener_connected IS 'Whether the worker''s LISTEN connection was up at its last heartbeat (false: it polls).';
COMMENT ON COLUMN {schema}.workers.version IS 'pgqueue version the worker runs.';
COMMENT ON COLUMN {schema}.workers.expires_at IS 'last_heartbeat + 3 heartbeat intervals: past it, the worker is presumed dead.';
COMMENT ON COLUMN {schema}.workers.alive IS 'expires_at is in the future: the worker heartbeated within 3 of its heartbeat intervals.';

-- -- settings -------------------------------------------------------------------------------

CREATE TABLE {schema}.settings (
    name       text        PRIMARY KEY,
    value      jsonb       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text
);
COMMENT ON TABLE {schema}.settings IS
    'Settings the workers applied, for operators to see (e.g. retention.completed = seconds kept); written by the maintenance leader.';

-- -- queue_stats ----------------------------------------------------------------------------

CREATE VIEW {schema}.queue_stats AS
WITH live AS (
    SELECT queue,
           count(*) FILTER (WHERE state = 'available') AS available,
           count(*) FILTER (WHERE state = 'scheduled') AS scheduled,
           count(*) FILTER (WHERE state = 'running') AS running,
           count(*) FILTER (WHERE state = 'retryable') AS retryable,
           min(run_at) FILTER (WHERE state = 'available') AS oldest_available
    FROM {schema}.jobs_live
    GROUP BY queue
), finished AS (
    SELECT queue,
           count(*) FILTER (WHERE state = 'completed' AND finished_at >= now() - interval '1 minute') AS completed_1m,
           count(*) FILTER (WHERE state = 'completed' AND finished_at >= now() - interval '5 minutes') AS completed_5m,
           count(*) FILTER (WHERE state = 'completed') AS completed_15m,
           count(*) FILTER (WHERE state = 'discarded' AND finished_at >= now() - interval '1 minute') AS discarded_1m,
           count(*) FILTER (WHERE state = 'discarded' AND finished_at >= now() - interval '5 minutes') AS discarded_5m,
           count(*) FILTER (WHERE state = 'discarded') AS discarded_15m
    FROM (
        SELECT queue, state, finished_at FROM {schema}.jobs_completed
        WHERE finished_at >= now() - interval '15 minutes' AND finished_at < now() + interval '1 hour'
        UNION ALL
        SELECT queue, state, finished_at FROM {schema}.jobs_discarded
        WHERE finished_at >= now() - interval '15 minutes' AND finished_at < now() + interval '1 hour'
    ) AS f
    GROUP BY queue
), errored AS (
    -- Jobs that may hold errors of the last 5 minutes: live ones that failed before, and
    -- jobs finished in the last 5 minutes (errors are recorded before the job finishes).
    SELECT queue, errors FROM {schema}.jobs_live WHERE errors <> '[]'::jsonb
    UNION ALL
    SELECT queue, errors FROM {schema}.jobs_completed
    WHERE finished_at >= now() - interval '5 minutes' AND finished_at < now() + interval '1 hour'
      AND errors <> '[]'::jsonb
    UNION ALL
    SELECT queue, errors FROM {schema}.jobs_discarded
    WHERE finished_at >= now() - interval '5 minutes' AND finished_at < now() + interval '1 hour'
      AND errors <> '[]'::jsonb
), failed AS (
    SELECT r.queue, count(*) AS failed_attempts_5m
    FROM errored AS r
    CROSS JOIN LATERAL jsonb_array_elements(r.errors) AS e(err)
    WHERE (e.err ->> 'at')::timestamptz >= now() - interval '5 minutes'
    GROUP BY r.queue
), merged AS (
    SELECT coalesce(l.queue, f.queue) AS queue,
           coalesce(l.available, 0) AS available,
           coalesce(l.scheduled, 0) AS scheduled,
           coalesce(l.running, 0) AS running,
           coalesce(l.retryable, 0) AS retryable,
           coalesce(greatest(extract(epoch FROM now() - l.oldest_available)::float8, 0), 0) AS lag_seconds,
           coalesce(f.completed_1m, 0) AS completed_1m,
           coalesce(f.completed_5m, 0) AS completed_5m,
           coalesce(f.completed_15m, 0) AS completed_15m,
           coalesce(f.discarded_1m, 0) AS discarded_1m,
           coalesce(f.discarded_5m, 0) AS discarded_5m,
           coalesce(f.discarded_15m, 0) AS discarded_15m,
           coalesce(x.failed_attempts_5m, 0) AS failed_attempts_5m
    FROM live AS l
    FULL JOIN finished AS f ON f.queue = l.queue
    LEFT JOIN failed AS x ON x.queue = coalesce(l.queue, f.queue)
)
SELECT queue, available, scheduled, running, retryable, lag_seconds,
       completed_1m, completed_5m, completed_15m, discarded_1m, discarded_5m, discarded_15m,
       failed_attempts_5m,
       CASE WHEN failed_attempts_5m + completed_5m = 0 THEN 0::float8
            ELSE failed_attempts_5m::float8 / (failed_attempts_5m + completed_5m) END AS failure_rate_5m
FROM merged;

COMMENT ON VIEW {schema}.queue_stats IS
    'One row per queue that has live jobs or finished jobs in the last 15 minutes: depth, lag, throughput, failures.';
COMMENT ON COLUMN {schema}.queue_stats.queue IS 'Queue name.';
COMMENT ON COLUMN {schema}.queue_stats.available IS 'Jobs ready to run now (waiting for a worker).';
COMMENT ON COLUMN {schema}.queue_stats.scheduled IS 'Jobs waiting for their run_at.';
COMMENT ON COLUMN {schema}.queue_stats.running IS 'Jobs claimed by a worker under a lease.';
COMMENT ON COLUMN {schema}.queue_stats.retryable IS 'Jobs that failed and wait for their backoff before the next attempt.';
COMMENT ON COLUMN {schema}.queue_stats.lag_seconds IS 'Age of the oldest available job (now() - run_at), 0 when none is available: how far behind the workers are.';
COMMENT ON COLUMN {schema}.queue_stats.completed_1m IS 'Jobs completed in the last minute.';
COMMENT ON COLUMN {schema}.queue_stats.completed_5m IS 'Jobs completed in the last 5 minutes.';
COMMENT ON COLUMN {schema}.queue_stats.completed_15m IS 'Jobs completed in the last 15 minutes.';
COMMENT ON COLUMN {schema}.queue_stats.discarded_1m IS 'Jobs discarded (dead letter) in the last minute.';
COMMENT ON COLUMN {schema}.queue_stats.discarded_5m IS 'Jobs discarded in the last 5 minutes.';
COMMENT ON COLUMN {schema}.queue_stats.discarded_15m IS 'Jobs discarded in the last 15 minutes.';
COMMENT ON COLUMN {schema}.queue_stats.failed_attempts_5m IS 'Failed attempts recorded in the last 5 minutes: errors of live jobs (retryable, or retried and running again) plus errors of jobs that finished in the last 5 minutes (discarded, or completed after a retry). Lease expiries count.';
COMMENT ON COLUMN {schema}.queue_stats.failure_rate_5m IS 'failed_attempts_5m / (failed_attempts_5m + completed_5m), 0 when both are 0: the share of attempts that failed in the last 5 minutes.';

-- -- failures -------------------------------------------------------------------------------

CREATE VIEW {schema}.failures AS
WITH latest AS (
    SELECT id, task, errors -> -1 AS err
    FROM {schema}.jobs_live
    WHERE errors <> '[]'::jsonb
    UNION ALL
    SELECT id, task, errors -> -1 AS err
    FROM {schema}.jobs_discarded
    WHERE finished_at >= now() - interval '24 hours' AND finished_at < now() + interval '1 hour'
      AND errors <> '[]'::jsonb
), flat AS MATERIALIZED (
    SELECT id, task,
           coalesce(err ->> 'type', 'unknown') AS error_type,
           err ->> 'message' AS message,
           (err ->> 'at')::timestamptz AS at
    FROM latest
), grouped AS (
    SELECT task, error_type, count(*) AS count, max(at) AS last_seen
    FROM flat
    GROUP BY task, error_type
)
-- The latest error of each group: a hash join on (task, type, time) finds it without
-- sorting every failure.
SELECT DISTINCT ON (g.task, g.error_type)
       g.task, g.error_type, g.count, g.last_seen, f.message AS last_message, f.id AS last_job_id
FROM grouped AS g
LEFT JOIN flat AS f ON f.task = g.task AND f.error_type = g.error_type AND f.at = g.last_seen
ORDER BY g.task, g.error_type, f.id DESC;

COMMENT ON VIEW {schema}.failures IS
    'Recent failures grouped by task and error type. Covers live jobs that have failed at least once (retryable, or retried and waiting or running again) and jobs discarded in the last 24 hours; each job counts once, under its latest error.';
COMMENT ON COLUMN {schema}.failures.task IS 'Task name.';
COMMENT ON COLUMN {schema}.failures.error_type IS 'The exception''s qualified type (e.g. builtins.ValueError), or LeaseExpired when the worker died or hung.';
COMMENT ON COLUMN {schema}.failures.count IS 'Jobs whose latest error is of this type.';
COMMENT ON COLUMN {schema}.failures.last_seen IS 'When the most recent of these errors was recorded.';
COMMENT ON COLUMN {schema}.failures.last_message IS 'The most recent error''s message.';
COMMENT ON COLUMN {schema}.failures.last_job_id IS 'The job that had the most recent of these errors (see pgqueue jobs show ID).';

-- -- health ---------------------------------------------------------------------------------

CREATE VIEW {schema}.health AS
WITH partitions AS (
    SELECT to_date(right(child.relname, 8), 'YYYYMMDD') AS day
    FROM pg_inherits AS i
    JOIN pg_class AS parent ON parent.oid = i.inhparent
    JOIN pg_class AS child ON child.oid = i.inhrelid
    WHERE parent.oid IN ('{schema}.jobs_completed'::regclass, '{schema}.jobs_discarded'::regclass,
                         '{schema}.jobs_cancelled'::regclass)
), holder AS (
    SELECT pid, xact_start, age(backend_xmin) AS xmin_age
    FROM pg_stat_activity
    WHERE backend_xmin IS NOT NULL
      AND pid <> pg_backend_pid()
      AND (datname = current_database() OR datname IS NULL)
    ORDER BY age(backend_xmin) DESC, xact_start
    LIMIT 1
)
SELECT (SELECT count(*) FROM {schema}.jobs_live) AS live_rows,
       pg_total_relation_size('{schema}.jobs_live'::regclass) AS live_size_bytes,
       coalesce((SELECT n_dead_tup FROM pg_stat_user_tables
                 WHERE relid = '{schema}.jobs_live'::regclass), 0) AS live_dead_tuples,
       (SELECT extract(epoch FROM now() - xact_start)::float8 FROM holder) AS oldest_xact_age_seconds,
       (SELECT pid FROM holder) AS oldest_xact_pid,
       (SELECT xmin_age FROM holder) AS oldest_xmin_age_xids,
       (SELECT count(*) FROM {schema}.worker_registry WHERE expires_at > now()) AS workers_alive,
       (SELECT count(*) FROM {schema}.worker_registry
        WHERE expires_at > now() AND listener_connected) AS listeners_connected,
       (SELECT count(*) FROM partitions) AS finished_partitions,
       (SELECT min(day) FROM partitions) AS oldest_finished_partition;

COMMENT ON VIEW {schema}.health IS 'One row: the state of the live partition, vacuum''s horizon, workers and partitions.';
COMMENT ON COLUMN {schema}.health.live_rows IS 'Rows in jobs_live (every job not yet finished).';
COMMENT ON COLUMN {schema}.health.live_size_bytes IS 'Size of jobs_live with its indexes and TOAST: should stay small; growth with few live_rows means bloat.';
COMMENT ON COLUMN {schema}.health.live_dead_tuples IS 'Dead row versions in jobs_live awaiting vacuum (statistics, approximate).';
COMMENT ON COLUMN {schema}.health.oldest_xact_age_seconds IS 'Age of the transaction holding back vacuum the most (oldest backend_xmin in this database), NULL when none; minutes here mean dead tuples pile up. Needs pg_read_all_stats (or superuser) to see other roles'' sessions.';
COMMENT ON COLUMN {schema}.health.oldest_xact_pid IS 'Backend pid of that transaction (pg_stat_activity.pid; pg_terminate_backend(pid) ends it).';
COMMENT ON COLUMN {schema}.health.oldest_xmin_age_xids IS 'How many transaction ids that transaction''s snapshot is behind.';
COMMENT ON COLUMN {schema}.health.workers_alive IS 'Worker processes whose heartbeat is current (workers.alive).';
COMMENT ON COLUMN {schema}.health.listeners_connected IS 'Alive workers whose LISTEN connection is up.';
COMMENT ON COLUMN {schema}.health.finished_partitions IS 'Day partitions holding finished jobs (all three final states).';
COMMENT ON COLUMN {schema}.health.oldest_finished_partition IS 'Day (UTC) of the oldest finished-job partition still kept.';

-- -- retention ------------------------------------------------------------------------------

CREATE VIEW {schema}.retention AS
WITH parts AS (
    SELECT parent.relname AS parent,
           to_date(right(child.relname, 8), 'YYYYMMDD') AS day,
           greatest(child.reltuples, 0)::bigint AS rows_estimate,
           pg_total_relation_size(child.oid) AS size_bytes
    FROM pg_inherits AS i
    JOIN pg_class AS parent ON parent.oid = i.inhparent
    JOIN pg_class AS child ON child.oid = i.inhrelid
    WHERE parent.oid IN ('{schema}.jobs_completed'::regclass, '{schema}.jobs_discarded'::regclass,
                         '{schema}.jobs_cancelled'::regclass)
)
SELECT s.state::{schema}.job_state AS state,
       (SELECT make_interval(secs => (value #>> '{{}}')::float8)
        FROM {schema}.settings WHERE name = 'retention.' || s.state) AS keep_for,
       count(p.day) AS partitions,
       min(p.day) AS oldest_day,
       max(p.day) AS newest_day,
       coalesce(sum(p.rows_estimate), 0)::bigint AS rows_estimate,
       coalesce(sum(p.size_bytes), 0)::bigint AS size_bytes
FROM (VALUES ('completed'), ('discarded'), ('cancelled')) AS s(state)
LEFT JOIN parts AS p ON p.parent = 'jobs_' || s.state
GROUP BY s.state
ORDER BY 1;

COMMENT ON VIEW {schema}.retention IS 'What retention holds: the day partitions of each final state and how long they are kept.';
COMMENT ON COLUMN {schema}.retention.state IS 'Final state (completed, discarded, cancelled).';
COMMENT ON COLUMN {schema}.retention.keep_for IS 'Retention last applied by the maintenance leader (settings retention.<state>); NULL before the first run, or when kept forever.';
COMMENT ON COLUMN {schema}.retention.partitions IS 'Day partitions of this state, including the few created ahead of today.';
COMMENT ON COLUMN {schema}.retention.oldest_day IS 'Oldest day (UTC) still kept.';
COMMENT ON COLUMN {schema}.retention.newest_day IS 'Newest day partition (created ahead).';
COMMENT ON COLUMN {schema}.retention.rows_estimate IS 'Rows in those partitions, from the planner statistics (pg_class.reltuples): approximate, 0 before the first ANALYZE.';
COMMENT ON COLUMN {schema}.retention.size_bytes IS 'Disk size of those partitions with their indexes.';

-- -- operator functions -------------------------------------------------------------------

-- cancel_job: stop a job for good.
--   available / scheduled / retryable -> moved to cancelled at once; returns 'cancelled'.
--   running -> cancel_requested_at is set; the worker holding it cancels the handler at
--              its next heartbeat and records 'cancelled'; returns 'running'.
--   already final -> unchanged; returns its state.   unknown id -> NULL.
CREATE FUNCTION {schema}.cancel_job(job_id bigint) RETURNS {schema}.job_state
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_state {schema}.job_state;
BEGIN
    -- Each statement sees rows committed before it started; a job changing state between
    -- two of them (claimed, finished, retried) is caught by the next round.
    FOR i IN 1..5 LOOP
        WITH gone AS (
            DELETE FROM {schema}.jobs_live AS j
            WHERE j.id = cancel_job.job_id AND j.state IN ('available', 'scheduled', 'retryable')
            RETURNING j.*
        )
        INSERT INTO {schema}.jobs
            (id, queue, task, args, state, priority, run_at, attempt, max_attempts, unique_key,
             created_at, started_at, finished_at, worker_id, errors, cancel_requested_at)
        SELECT id, queue, task, args, 'cancelled', priority, run_at, attempt, max_attempts, unique_key,
               created_at, started_at, now(), worker_id, errors, now()
        FROM gone
        RETURNING state INTO v_state;
        IF v_state IS NOT NULL THEN
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

COMMENT ON FUNCTION {schema}.cancel_job(bigint) IS
    'Cancel a job: a waiting job is cancelled at once (returns cancelled); a running one is asked to stop and its worker records cancelled at its next heartbeat (returns running); a finished job is left alone (returns its state); an unknown id returns NULL.';

-- retry_job: give a discarded or cancelled job another run. It moves back to the live
-- partition as available now, keeping its attempts and errors, with room for one more
-- attempt. Returns false when the job is not discarded or cancelled (or does not exist).
CREATE FUNCTION {schema}.retry_job(job_id bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_id bigint;
    v_queue text;
BEGIN
    WITH gone AS (
        DELETE FROM {schema}.jobs AS j
        WHERE j.id = retry_job.job_id AND j.state IN ('discarded', 'cancelled')
        RETURNING j.*
    )
    INSERT INTO {schema}.jobs_live
        (id, queue, task, args, state, priority, run_at, attempt, max_attempts, unique_key,
         created_at, started_at, finished_at, worker_id, errors, cancel_requested_at)
    SELECT id, queue, task, args, 'available', priority, now(), attempt,
           CASE WHEN max_attempts IS NULL THEN NULL ELSE greatest(max_attempts, attempt + 1) END,
           unique_key, created_at, started_at, NULL, worker_id, errors, NULL
    FROM gone
    RETURNING id, queue INTO v_id, v_queue;
    IF v_id IS NULL THEN
        RETURN false;
    END IF;
    PERFORM pg_notify({channel}, v_queue);
    RETURN true;
EXCEPTION WHEN unique_violation THEN
    RAISE EXCEPTION 'pgqueue.retry_job: job % cannot be retried: a live job holds its unique_key', retry_job.job_id
        USING ERRCODE = 'unique_violation',
              HINT = 'wait for that job to finish, or cancel it first';
END
$fn$;

COMMENT ON FUNCTION {schema}.retry_job(bigint) IS
    'Retry a discarded or cancelled job: it becomes available now, keeps its attempts and errors and gets one more attempt if it had none left. Returns false if the job is not discarded or cancelled.';
