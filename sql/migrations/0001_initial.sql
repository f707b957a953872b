-- pgqueue schema, version 1.
--
-- Placeholders, substituted with psycopg.sql (literal braces are doubled):
--   {schema}  the quoted schema identifier
--   {channel} the NOTIFY channel, as a string literal
--   {id_seq}  the job id sequence's qualified name, as a string literal
--
-- Layout: pgqueue.jobs is LIST-partitioned by state.
--   jobs_live       available | scheduled | running | retryable: the one small relation
--                   every claim touches; three indexes that hot-path rows enter.
--   jobs_completed, jobs_discarded, jobs_cancelled
--                   RANGE-partitioned by finished_at, one partition per UTC day,
--                   created ahead and dropped whole by partition maintenance.
-- Finishing a job moves its row from jobs_live to a day partition (DELETE ... RETURNING
-- feeding an INSERT), so workers never hit row-movement serialization errors.

CREATE TYPE {schema}.job_state AS ENUM (
    'available', 'scheduled', 'running', 'retryable', 'completed', 'discarded', 'cancelled'
);

CREATE SEQUENCE {schema}.jobs_id_seq AS bigint;

CREATE TABLE {schema}.jobs (
    id               bigint      NOT NULL DEFAULT nextval({id_seq}),
    run_at           timestamptz NOT NULL DEFAULT now(),
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    lease_expires_at timestamptz,
    lease_token      uuid,
    attempt          integer     NOT NULL DEFAULT 0,
    max_attempts     integer,
    priority         smallint    NOT NULL DEFAULT 0,
    state            {schema}.job_state NOT NULL,
    queue            text        NOT NULL,
    task             text        NOT NULL,
    args             jsonb       NOT NULL DEFAULT '{{}}',
    unique_key       text,
    worker_id        text,
    errors           jsonb       NOT NULL DEFAULT '[]',
    CONSTRAINT jobs_finished_iff_final CHECK (
        (state IN ('completed', 'discarded', 'cancelled')) = (finished_at IS NOT NULL)),
    CONSTRAINT jobs_lease_iff_running CHECK (
        (state = 'running') = (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL)),
    CONSTRAINT jobs_attempt_range CHECK (
        attempt >= 0 AND (max_attempts IS NULL OR (max_attempts >= 1 AND attempt <= max_attempts))),
    CONSTRAINT jobs_queue_length CHECK (char_length(queue) BETWEEN 1 AND 64),
    CONSTRAINT jobs_task_length CHECK (char_length(task) BETWEEN 1 AND 200),
    CONSTRAINT jobs_unique_key_length CHECK (char_length(unique_key) BETWEEN 1 AND 200),
    CONSTRAINT jobs_args_object CHECK (jsonb_typeof(args) = 'object'),
    CONSTRAINT jobs_errors_array CHECK (jsonb_typeof(errors) = 'array')
) PARTITION BY LIST (state);

CREATE TABLE {schema}.jobs_live PARTITION OF {schema}.jobs
    FOR VALUES IN ('available', 'scheduled', 'running', 'retryable')
    WITH (
        fillfactor = 80,
        autovacuum_vacuum_scale_factor = 0,
        autovacuum_vacuum_threshold = 2000,
        autovacuum_vacuum_insert_scale_factor = 0,
        autovacuum_vacuum_insert_threshold = 20000,
        autovacuum_analyze_scale_factor = 0,
        autovacuum_analyze_threshold = 20000,
        autovacuum_vacuum_cost_delay = 0
    );

ALTER TABLE {schema}.jobs_live ADD CONSTRAINT jobs_live_pkey PRIMARY KEY (id);

-- Server-side payload cap on the stored (possibly compressed) jsonb size, a backstop
-- behind the client's check of the JSON text (App(max_payload_bytes=...)). It sits on the
-- live partition only, where rows are inserted, so `pgqueue migrate --max-payload-bytes N`
-- can change it by scanning the small live set, never the finished partitions.
ALTER TABLE {schema}.jobs_live ADD CONSTRAINT jobs_args_size CHECK (pg_column_size(args) <= 8388608);

-- The claim's index: matches WHERE state = 'available' AND queue = $1
-- ORDER BY priority DESC, run_at, id exactly.
CREATE INDEX jobs_live_fetch ON {schema}.jobs_live (queue, priority DESC, run_at, id)
    WHERE state = 'available';

-- Timers: when a waiting job becomes due, or when a running job's lease expires.
-- Serves the scheduler (scheduled/retryable -> available) and the rescuer.
CREATE INDEX jobs_live_timers ON {schema}.jobs_live
    ((CASE WHEN state = 'running' THEN lease_expires_at ELSE run_at END))
    WHERE state IN ('scheduled', 'retryable', 'running');

-- Idempotency: at most one live job per unique_key. Partial, so rows without a key
-- never enter it and it costs nothing on the hot path.
CREATE UNIQUE INDEX jobs_live_unique_key ON {schema}.jobs_live (unique_key)
    WHERE unique_key IS NOT NULL;

CREATE TABLE {schema}.jobs_completed PARTITION OF {schema}.jobs
    FOR VALUES IN ('completed') PARTITION BY RANGE (finished_at);
CREATE TABLE {schema}.jobs_discarded PARTITION OF {schema}.jobs
    FOR VALUES IN ('discarded') PARTITION BY RANGE (finished_at);
CREATE TABLE {schema}.jobs_cancelled PARTITION OF {schema}.jobs
    FOR VALUES IN ('cancelled') PARTITION BY RANGE (finished_at);

-- Finished partitions are append-only: an id index for lookups, BRIN for time windows.
CREATE INDEX jobs_completed_id ON {schema}.jobs_completed (id);
CREATE INDEX jobs_completed_finished_at ON {schema}.jobs_completed USING brin (finished_at);
CREATE INDEX jobs_discarded_id ON {schema}.jobs_discarded (id);
CREATE INDEX jobs_discarded_finished_at ON {schema}.jobs_discarded USING brin (finished_at);
CREATE INDEX jobs_cancelled_id ON {schema}.jobs_cancelled (id);
CREATE INDEX jobs_cancelled_finished_at ON {schema}.jobs_cancelled USING brin (finished_at);

-- enqueue_v1: the public SQL entry point (triggers, other languages, psql). One statement
-- from the caller's point of view, inside the caller's transaction.
--   * run_at in the future -> 'scheduled', else 'available' (database clock).
--   * unique_key matching a live job -> returns that job's id, also under concurrent races.
--   * a NULL max_attempts means "the task's own setting", filled in by the claiming worker.
--   * NOTIFY carries only the queue name; Postgres folds identical notifications of one
--     transaction into one, so a transaction sends at most one per queue.
CREATE FUNCTION {schema}.enqueue(
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
            (task, args, queue, priority, run_at, unique_key, max_attempts, state)
        VALUES (enqueue.task, coalesce(enqueue.args, '{{}}'::jsonb), enqueue.queue,
                enqueue.priority, v_run_at, enqueue.unique_key, enqueue.max_attempts,
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
