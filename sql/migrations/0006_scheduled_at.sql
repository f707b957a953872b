-- pgqueue schema, version 6: jobs.scheduled_at, the time a job was first scheduled for.
--
-- run_at is rewritten by every retry (a failure, Retry, a rescue after a crash or a
-- freeze, retry_job()), so after a retry it no longer says which time the job was for: a
-- cron job's tick, say. scheduled_at is set once at enqueue (the run_at asked for; a cron
-- tick for cron jobs), never rewritten, and copied to the finished row.
--
-- NULL reads as run_at: it marks a row that no pgqueue code wrote since this version (a
-- producer's own INSERT or COPY, a producer still running the previous release, a job
-- that finished before this version). Every path that rewrites run_at or moves a row to
-- a finished partition first pins coalesce(scheduled_at, run_at), so that reading holds.
--
-- A nullable column without default: a catalog-only change, no table rewrite. It is
-- inherited by every partition, and by the day partitions created later (LIKE the parent).
ALTER TABLE {schema}.jobs ADD COLUMN scheduled_at timestamptz;
COMMENT ON COLUMN {schema}.jobs.scheduled_at IS
    'The time the job was scheduled for at enqueue (a cron job: its tick); retries rewrite run_at, never this. NULL reads as run_at (rows written without it, jobs finished before schema version 6).';

-- Live jobs (a small set by design) get their value now: a cron job's tick from
-- cron_ticks (its run_at may already be a retry time), else run_at. Finished rows are
-- left as they are: filling them would rewrite every kept finished row while this
-- migration holds the table's exclusive lock; they read as their run_at.
UPDATE {schema}.jobs_live AS j
SET scheduled_at = coalesce(t.tick, j.run_at)
FROM (
    SELECT l.id, c.tick
    FROM {schema}.jobs_live AS l
    LEFT JOIN {schema}.cron_ticks AS c ON c.job_id = l.id
) AS t
WHERE t.id = j.id;

-- The same range as run_at (0005): a value a worker cannot load would poison its queue.
ALTER TABLE {schema}.jobs_live ADD CONSTRAINT jobs_scheduled_at_range
    CHECK (scheduled_at >= '1900-01-01 00:00:00+00' AND scheduled_at < '9999-01-01 00:00:00+00');

-- Producers granted column INSERT on run_at (the roles script) write scheduled_at along
-- with it from this version on: grant it now, so that they keep working before the roles
-- script is run again.
DO $grants$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee::regrole AS grantee
        FROM pg_catalog.pg_attribute AS att
        CROSS JOIN LATERAL pg_catalog.aclexplode(att.attacl) AS a
        WHERE att.attrelid = '{schema}.jobs_live'::regclass AND att.attname = 'run_at'
          AND a.privilege_type = 'INSERT' AND a.grantee <> 0
    LOOP
        EXECUTE format('GRANT INSERT (scheduled_at) ON %s TO %s', '{schema}.jobs_live'::regclass, r.grantee);
    END LOOP;
END
$grants$;

-- enqueue_v1, unchanged but for scheduled_at = run_at. CREATE OR REPLACE keeps the
-- function's owner and grants but resets SECURITY DEFINER, which the roles script sets:
-- it is noted here and restored below.
SELECT pg_catalog.set_config('pgqueue.enqueue_was_definer', p.prosecdef::text, true)
FROM pg_catalog.pg_proc AS p
WHERE p.oid = '{schema}.enqueue(text, jsonb, text, integer, timestamptz, text, integer)'::regprocedure;

CREATE OR REPLACE FUNCTION {schema}.enqueue(
    task text,
    args jsonb DEFAULT '{{}}',
    queue text DEFAULT 'default',
    priority integer DEFAULT 0,
    run_at timestamptz DEFAULT now(),
    unique_key text DEFAULT NULL,
    max_attempts integer DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_run_at timestamptz := coalesce(enqueue.run_at, now());
    v_due boolean := coalesce(enqueue.run_at, now()) <= now();
    v_id bigint;
BEGIN
    IF enqueue.task IS NULL OR enqueue.queue IS NULL THEN
        RAISE EXCEPTION 'pgqueue.enqueue: task and queue must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF enqueue.queue !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{{0,63}}$' THEN
        RAISE EXCEPTION 'pgqueue.enqueue: invalid queue name %', quote_literal(enqueue.queue)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'queue names are 1-64 characters: letters, digits, _ . : -';
    END IF;
    IF enqueue.priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'pgqueue.enqueue: priority % out of range -32768..32767', enqueue.priority
            USING ERRCODE = 'numeric_value_out_of_range';
    END IF;
    FOR attempt IN 1..5 LOOP
        INSERT INTO {schema}.jobs_live
            (task, args, queue, priority, run_at, scheduled_at, unique_key, max_attempts, state)
        VALUES (enqueue.task, coalesce(enqueue.args, '{{}}'::jsonb), enqueue.queue,
                enqueue.priority, v_run_at, v_run_at, enqueue.unique_key, enqueue.max_attempts,
                CASE WHEN v_due THEN 'available' ELSE 'scheduled' END::{schema}.job_state)
        ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING
        RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            IF v_due THEN
                PERFORM pg_notify({channel}, enqueue.queue);
            END IF;
            RETURN v_id;
        END IF;
        -- A live job holds the key: return it. Each statement of a volatile function
        -- takes a fresh snapshot, so a concurrently committed holder is visible here.
        SELECT j.id INTO v_id FROM {schema}.jobs_live j WHERE j.unique_key = enqueue.unique_key;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
        -- The holder finished in between: its key is free again, so insert anew.
    END LOOP;
    RAISE EXCEPTION 'pgqueue.enqueue: unique_key % kept changing hands', quote_literal(enqueue.unique_key)
        USING ERRCODE = 'serialization_failure';
END
$fn$;

DO $definer$
BEGIN
    IF current_setting('pgqueue.enqueue_was_definer', true) = 'true' THEN
        ALTER FUNCTION {schema}.enqueue(text, jsonb, text, integer, timestamptz, text, integer) SECURITY DEFINER;
    END IF;
END
$definer$;

-- cancel_job and retry_job (0003), unchanged but for carrying scheduled_at over.
CREATE OR REPLACE FUNCTION {schema}.cancel_job(job_id bigint) RETURNS {schema}.job_state
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
            (id, queue, task, args, state, priority, run_at, scheduled_at, attempt, max_attempts,
             unique_key, created_at, started_at, finished_at, worker_id, errors, cancel_requested_at)
        SELECT id, queue, task, args, 'cancelled', priority, run_at, coalesce(scheduled_at, run_at),
               attempt, max_attempts, unique_key, created_at, started_at, now(), worker_id, errors, now()
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

CREATE OR REPLACE FUNCTION {schema}.retry_job(job_id bigint) RETURNS boolean
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
        (id, queue, task, args, state, priority, run_at, scheduled_at, attempt, max_attempts,
         unique_key, created_at, started_at, finished_at, worker_id, errors, cancel_requested_at)
    SELECT id, queue, task, args, 'available', priority, now(), coalesce(scheduled_at, run_at), attempt,
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
