-- pgqueue schema, version 7: flow control at enqueue and at the outcome (issue 12, the
-- enqueue side; the claim side is version 8).
--
--   jobs.concurrency_key  the job's key for per-key concurrency limits (stored here,
--                         enforced by the claim); NULL: no key.
--   jobs.expires_at       the deadline by which an attempt must start (database clock);
--                         the claims skip a job past it and maintenance cancels it.
--   jobs.snoozes          how often a handler snoozed the job (raise Snooze): a snooze
--                         gives the attempt back, so it is counted here instead.
--   jobs.dedupe_key       the key of a job enqueued under unique rules (Unique: a period,
--                         chosen states, replace/debounce). unique_key keeps its meaning:
--                         at most one live job per key, through jobs_live_unique_key.
--   unique_keys           the ledger of those keys: which job holds each, under which
--                         rules. Finished jobs leave the live partition and its indexes;
--                         the ledger row stays, so a key can be held by a finished job
--                         within its period, and concurrent enqueues of one key queue up
--                         on its row lock.
--   enqueue()             new parameters: concurrency_key, expires_at and the unique
--                         rules (unique_period, unique_states, unique_mode).
--   cancel_job(), retry_job(), views failures and queue_stats: carry and show the above.
--
-- Every new jobs column is nullable without a default, or (snoozes) has a constant
-- default: catalog-only changes, no table rewrite. They are inherited by every partition
-- and by the day partitions created later (LIKE the parent).

ALTER TABLE {schema}.jobs
    ADD COLUMN concurrency_key text,
    ADD COLUMN expires_at timestamptz,
    ADD COLUMN snoozes integer NOT NULL DEFAULT 0,
    ADD COLUMN dedupe_key text;

COMMENT ON COLUMN {schema}.jobs.concurrency_key IS
    'Key for per-key concurrency limits (at most N running per key); NULL: none. Given at enqueue or derived from an argument by the task declaration.';
COMMENT ON COLUMN {schema}.jobs.expires_at IS
    'Deadline (database clock): no attempt starts after it; a job still waiting then is cancelled with a pgqueue.Expired error. NULL: none.';
COMMENT ON COLUMN {schema}.jobs.snoozes IS
    'How often the handler snoozed the job (raise Snooze): each gave its attempt back, so attempt does not count them.';
COMMENT ON COLUMN {schema}.jobs.dedupe_key IS
    'Key of a job enqueued under unique rules (unique_keys holds which job has it); NULL: none. unique_key is the live-only key.';

-- On the live partition only (rows are inserted there), so they scan only the live set:
-- the same bounds as unique_key (0001) and run_at (0005).
ALTER TABLE {schema}.jobs_live
    ADD CONSTRAINT jobs_concurrency_key_length CHECK (char_length(concurrency_key) BETWEEN 1 AND 200),
    ADD CONSTRAINT jobs_dedupe_key_length CHECK (char_length(dedupe_key) BETWEEN 1 AND 200),
    ADD CONSTRAINT jobs_expires_at_range
        CHECK (expires_at >= '1900-01-01 00:00:00+00' AND expires_at < '9999-01-01 00:00:00+00'),
    ADD CONSTRAINT jobs_snoozes_range CHECK (snoozes >= 0);

-- Expiry: the maintenance tick finds waiting jobs whose deadline passed. Partial, so only
-- jobs with a deadline enter it (and only while they wait: a claim takes the running
-- version out), and jobs without one cost nothing.
CREATE INDEX jobs_live_expires ON {schema}.jobs_live (expires_at)
    WHERE expires_at IS NOT NULL AND state IN ('available', 'scheduled', 'retryable');

-- -- the unique ledger ----------------------------------------------------------------------

CREATE TABLE {schema}.unique_keys (
    key        text        PRIMARY KEY,
    -- The job holding the key: the last one enqueued under it (replace and debounce
    -- update that job instead of adding one).
    job_id     bigint      NOT NULL,
    -- The holder keeps the key while it is in one of these states...
    states     {schema}.job_state[] NOT NULL,
    -- ... and, with a period, until held_until (held_since + period).
    held_since timestamptz NOT NULL DEFAULT now(),
    held_until timestamptz,
    CONSTRAINT unique_keys_key_length CHECK (char_length(key) BETWEEN 1 AND 200),
    CONSTRAINT unique_keys_states CHECK (cardinality(states) >= 1),
    CONSTRAINT unique_keys_period CHECK (held_until IS NULL OR held_until > held_since),
    -- Only a period bounds how long a finished job holds its key.
    CONSTRAINT unique_keys_finished_needs_period CHECK (
        held_until IS NOT NULL OR NOT (states && ARRAY['completed', 'discarded', 'cancelled']::{schema}.job_state[]))
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.05, autovacuum_vacuum_threshold = 500);

COMMENT ON TABLE {schema}.unique_keys IS
    'One row per key of jobs enqueued with unique rules (Unique): the job holding it and the rules it holds it under. enqueue() locks the row, so enqueues of one key take turns; retention removes rows that hold nothing any more.';
COMMENT ON COLUMN {schema}.unique_keys.job_id IS 'The job holding the key (it may have finished and moved to a finished partition).';
COMMENT ON COLUMN {schema}.unique_keys.states IS 'The holder keeps the key while in one of these states.';
COMMENT ON COLUMN {schema}.unique_keys.held_since IS 'When the holder took the key (its enqueue transaction''s now()).';
COMMENT ON COLUMN {schema}.unique_keys.held_until IS 'held_since + the period: the key is free from then on, whatever the state; NULL: no period.';

-- -- privileges of roles set up before this version -------------------------------------
-- The ledger belongs to whoever owns the jobs table (the owner role of the roles script):
-- enqueue(), SECURITY DEFINER as that owner, writes it. Producers granted column INSERT on
-- run_at (the roles script) write concurrency_key and expires_at too (the plain INSERT
-- and COPY of the Python API); roles that read the jobs read the ledger; workers, who
-- may DELETE from jobs_live, also clean the ledger (retention). Granted now, so all keep
-- working before the roles script is run again.
DO $grants$
DECLARE
    r record;
    v_owner regrole := (SELECT c.relowner::regrole FROM pg_catalog.pg_class AS c WHERE c.oid = '{schema}.jobs'::regclass);
BEGIN
    IF v_owner <> current_user::regrole THEN
        EXECUTE format('ALTER TABLE %s OWNER TO %s', '{schema}.unique_keys'::regclass, v_owner);
    END IF;
    FOR r IN
        SELECT DISTINCT a.grantee::regrole AS grantee
        FROM pg_catalog.pg_attribute AS att
        CROSS JOIN LATERAL pg_catalog.aclexplode(att.attacl) AS a
        WHERE att.attrelid = '{schema}.jobs_live'::regclass AND att.attname = 'run_at'
          AND a.privilege_type = 'INSERT' AND a.grantee <> 0
    LOOP
        EXECUTE format('GRANT INSERT (concurrency_key, expires_at) ON %s TO %s', '{schema}.jobs_live'::regclass, r.grantee);
    END LOOP;
    FOR r IN
        SELECT DISTINCT a.grantee::regrole AS grantee, a.privilege_type
        FROM pg_catalog.pg_class AS c
        CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) AS a
        WHERE ((c.oid = '{schema}.jobs'::regclass AND a.privilege_type = 'SELECT')
               OR (c.oid = '{schema}.jobs_live'::regclass AND a.privilege_type = 'DELETE'))
          AND a.grantee <> 0 AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT %s ON %s TO %s', r.privilege_type, '{schema}.unique_keys'::regclass, r.grantee);
    END LOOP;
END
$grants$;

-- -- enqueue() -------------------------------------------------------------------------------
-- More parameters: CREATE OR REPLACE cannot add them, and a second enqueue() beside the
-- old one would make every call naming fewer arguments ambiguous. So the old one is
-- dropped and the new one created; its owner, SECURITY DEFINER (the roles script sets
-- it) and EXECUTE grants are noted first and given back after.
SELECT pg_catalog.set_config('pgqueue.enqueue_was_definer', p.prosecdef::text, true),
       pg_catalog.set_config('pgqueue.enqueue_owner', p.proowner::regrole::text, true),
       pg_catalog.set_config('pgqueue.enqueue_acl', coalesce(p.proacl::text, ''), true)
FROM pg_catalog.pg_proc AS p
WHERE p.oid = '{schema}.enqueue(text, jsonb, text, integer, timestamptz, text, integer)'::regprocedure;

DROP FUNCTION {schema}.enqueue(text, jsonb, text, integer, timestamptz, text, integer);

-- enqueue: the public SQL entry point (triggers, other languages, psql). One statement
-- from the caller's point of view, inside the caller's transaction.
--   * run_at in the future -> 'scheduled', else 'available' (database clock).
--   * a NULL max_attempts means "the task's own setting", filled in by the claiming worker.
--   * concurrency_key, expires_at: stored as given (NULL: none).
--   * unique_key alone: at most one live job per key; a live holder's id is returned, also
--     under concurrent races (the unique index jobs_live_unique_key).
--   * unique_key with any of unique_period, unique_states, unique_mode: the unique rules
--     (the ledger unique_keys, see enqueue_unique below).
--   * NOTIFY carries only the queue name; Postgres folds identical notifications of one
--     transaction into one, so a transaction sends at most one per queue.
CREATE FUNCTION {schema}.enqueue(
    task text,
    args jsonb DEFAULT '{{}}',
    queue text DEFAULT 'default',
    priority integer DEFAULT 0,
    run_at timestamptz DEFAULT now(),
    unique_key text DEFAULT NULL,
    max_attempts integer DEFAULT NULL,
    concurrency_key text DEFAULT NULL,
    expires_at timestamptz DEFAULT NULL,
    unique_period interval DEFAULT NULL,
    unique_states text[] DEFAULT NULL,
    unique_mode text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_run_at timestamptz := coalesce(enqueue.run_at, now());
    v_due boolean := coalesce(enqueue.run_at, now()) <= now();
    v_args jsonb := coalesce(enqueue.args, '{{}}'::jsonb);
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
    IF enqueue.concurrency_key IS NOT NULL AND char_length(enqueue.concurrency_key) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'pgqueue.enqueue: concurrency_key must be 1-200 characters, got %',
            char_length(enqueue.concurrency_key)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue.unique_period IS NOT NULL OR enqueue.unique_states IS NOT NULL OR enqueue.unique_mode IS NOT NULL THEN
        RETURN {schema}.enqueue_unique(
            enqueue.task, v_args, enqueue.queue, enqueue.priority, v_run_at, enqueue.unique_key,
            enqueue.max_attempts, enqueue.concurrency_key, enqueue.expires_at, enqueue.unique_period,
            enqueue.unique_states, enqueue.unique_mode);
    END IF;
    FOR attempt IN 1..5 LOOP
        INSERT INTO {schema}.jobs_live
            (task, args, queue, priority, run_at, scheduled_at, unique_key, max_attempts,
             concurrency_key, expires_at, state)
        VALUES (enqueue.task, v_args, enqueue.queue, enqueue.priority, v_run_at, v_run_at,
                enqueue.unique_key, enqueue.max_attempts, enqueue.concurrency_key, enqueue.expires_at,
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

-- enqueue_unique: enqueue() under unique rules (called by enqueue(), which checked the
-- queue, priority and concurrency key). The key's ledger row is taken first, with
-- INSERT ... ON CONFLICT DO UPDATE: that locks it, so a concurrent enqueue of the same key
-- waits there until this transaction ends. Then, in statements of their own (each with a
-- fresh snapshot under READ COMMITTED, so the holder an earlier enqueue committed is
-- visible), the holder is looked up, live or finished:
--   * no holder, or one that no longer holds the key (left its states, or its period is
--     over): a new job is inserted and takes the key;
--   * a holder: mode keep returns its id; replace (its args, priority, run_at,
--     concurrency_key, expires_at become this enqueue's) and debounce (its run_at moves to
--     this enqueue's run_at, if later) change it if it still waits (available, scheduled,
--     retryable) and return its id; a running or finished holder is never changed.
-- unique_states defaults to the live states for keep and to the waiting states for
-- replace and debounce; finished states need a unique_period (sliding: it starts when a
-- job takes the key).
CREATE FUNCTION {schema}.enqueue_unique(
    task text,
    args jsonb,
    queue text,
    priority integer,
    run_at timestamptz,
    unique_key text,
    max_attempts integer,
    concurrency_key text,
    expires_at timestamptz,
    unique_period interval,
    unique_states text[],
    unique_mode text
) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_mode text := coalesce(enqueue_unique.unique_mode, 'keep');
    v_due boolean := enqueue_unique.run_at <= now();
    v_states {schema}.job_state[];
    v_bad text;
    v_until timestamptz;
    v_new bigint;
    h_id bigint;
    h_states {schema}.job_state[];
    h_since timestamptz;
    h_until timestamptz;
    h_state {schema}.job_state;
    h_now {schema}.job_state;
BEGIN
    IF enqueue_unique.unique_key IS NULL THEN
        RAISE EXCEPTION 'pgqueue.enqueue: unique_period, unique_states and unique_mode need a unique_key'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF char_length(enqueue_unique.unique_key) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'pgqueue.enqueue: unique_key must be 1-200 characters, got %',
            char_length(enqueue_unique.unique_key)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_mode NOT IN ('keep', 'replace', 'debounce') THEN
        RAISE EXCEPTION 'pgqueue.enqueue: unknown unique_mode %', quote_literal(v_mode)
            USING ERRCODE = 'invalid_parameter_value', HINT = 'use keep, replace or debounce';
    END IF;
    IF enqueue_unique.unique_states IS NULL THEN
        v_states := CASE WHEN v_mode = 'keep'
                         THEN ARRAY['available', 'scheduled', 'running', 'retryable']::{schema}.job_state[]
                         ELSE ARRAY['available', 'scheduled', 'retryable']::{schema}.job_state[] END;
    ELSIF cardinality(enqueue_unique.unique_states) = 0 THEN
        RAISE EXCEPTION 'pgqueue.enqueue: unique_states must name at least one state'
            USING ERRCODE = 'invalid_parameter_value';
    ELSE
        SELECT s INTO v_bad
        FROM unnest(enqueue_unique.unique_states) AS s
        WHERE s IS NULL OR s NOT IN ('available', 'scheduled', 'running', 'retryable', 'completed', 'discarded', 'cancelled')
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'pgqueue.enqueue: unique_states has an unknown state %', coalesce(quote_literal(v_bad), 'NULL')
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'give one or more of available, scheduled, running, retryable, completed, discarded, cancelled';
        END IF;
        SELECT array_agg(DISTINCT s::{schema}.job_state) INTO v_states FROM unnest(enqueue_unique.unique_states) AS s;
    END IF;
    IF enqueue_unique.unique_period IS NOT NULL
       AND (extract(epoch FROM enqueue_unique.unique_period) <= 0
            OR enqueue_unique.unique_period > interval '3650 days') THEN
        RAISE EXCEPTION 'pgqueue.enqueue: unique_period must be positive and at most 3650 days, got %',
            enqueue_unique.unique_period
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue_unique.unique_period IS NULL
       AND v_states && ARRAY['completed', 'discarded', 'cancelled']::{schema}.job_state[] THEN
        RAISE EXCEPTION 'pgqueue.enqueue: unique_states with completed, discarded or cancelled need a unique_period'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'a finished job holds its key for the period after it took it';
    END IF;
    v_until := now() + enqueue_unique.unique_period;
    v_new := nextval({id_seq});
    FOR i IN 1..5 LOOP
        -- Take the key (a new row naming the job about to be inserted), or lock its row.
        INSERT INTO {schema}.unique_keys AS u (key, job_id, states, held_since, held_until)
        VALUES (enqueue_unique.unique_key, v_new, v_states, now(), v_until)
        ON CONFLICT (key) DO UPDATE SET key = excluded.key
        RETURNING u.job_id, u.states, u.held_since, u.held_until INTO h_id, h_states, h_since, h_until;
        h_state := NULL;
        IF h_id <> v_new AND (h_until IS NULL OR h_until > now()) THEN
            SELECT j.state INTO h_state FROM {schema}.jobs_live AS j WHERE j.id = h_id;
            IF h_state IS NULL AND h_states && ARRAY['completed', 'discarded', 'cancelled']::{schema}.job_state[] THEN
                -- Not live (a later snapshot than the one that missed it above, so a job
                -- that finished in between is found here): finished no earlier than it
                -- took the key, which prunes the older day partitions.
                SELECT j.state INTO h_state FROM {schema}.jobs AS j
                WHERE j.id = h_id AND j.state = ANY(h_states) AND j.finished_at >= h_since;
            END IF;
        END IF;
        IF h_state IS NULL OR NOT (h_state = ANY(h_states)) THEN
            -- The key is free (new, or its holder no longer holds it): a new job takes it.
            INSERT INTO {schema}.jobs_live
                (id, task, args, queue, priority, run_at, scheduled_at, max_attempts, concurrency_key,
                 expires_at, dedupe_key, state)
            VALUES (v_new, enqueue_unique.task, enqueue_unique.args, enqueue_unique.queue, enqueue_unique.priority,
                    enqueue_unique.run_at, enqueue_unique.run_at, enqueue_unique.max_attempts,
                    enqueue_unique.concurrency_key, enqueue_unique.expires_at, enqueue_unique.unique_key,
                    CASE WHEN v_due THEN 'available' ELSE 'scheduled' END::{schema}.job_state);
            IF h_id <> v_new THEN
                UPDATE {schema}.unique_keys AS u
                SET job_id = v_new, states = v_states, held_since = now(), held_until = v_until
                WHERE u.key = enqueue_unique.unique_key;
            END IF;
            IF v_due THEN
                PERFORM pg_notify({channel}, enqueue_unique.queue);
            END IF;
            RETURN v_new;
        END IF;
        IF v_mode = 'keep' OR h_state NOT IN ('available', 'scheduled', 'retryable') THEN
            RETURN h_id;  -- held: a running or finished holder is never changed
        END IF;
        IF v_mode = 'replace' THEN
            UPDATE {schema}.jobs_live AS j
            SET args = enqueue_unique.args,
                priority = enqueue_unique.priority,
                run_at = enqueue_unique.run_at,
                scheduled_at = CASE WHEN j.state = 'retryable' THEN coalesce(j.scheduled_at, j.run_at)
                                    ELSE enqueue_unique.run_at END,
                state = CASE WHEN v_due THEN 'available'
                             WHEN j.state = 'retryable' THEN 'retryable'
                             ELSE 'scheduled' END::{schema}.job_state,
                concurrency_key = enqueue_unique.concurrency_key,
                expires_at = enqueue_unique.expires_at
            WHERE j.id = h_id AND j.state IN ('available', 'scheduled', 'retryable')
            RETURNING j.state INTO h_now;
        ELSE  -- debounce: only ever later
            UPDATE {schema}.jobs_live AS j
            SET run_at = greatest(j.run_at, enqueue_unique.run_at),
                scheduled_at = CASE WHEN j.state = 'retryable' THEN coalesce(j.scheduled_at, j.run_at)
                                    ELSE greatest(j.run_at, enqueue_unique.run_at) END,
                state = CASE WHEN greatest(j.run_at, enqueue_unique.run_at) <= now() THEN 'available'
                             WHEN j.state = 'retryable' THEN 'retryable'
                             ELSE 'scheduled' END::{schema}.job_state
            WHERE j.id = h_id AND j.state IN ('available', 'scheduled', 'retryable')
            RETURNING j.state INTO h_now;
        END IF;
        IF FOUND THEN
            IF h_now = 'available' THEN
                PERFORM pg_notify({channel}, enqueue_unique.queue);
            END IF;
            RETURN h_id;
        END IF;
        -- The holder stopped waiting in between (a worker claimed it, an operator cancelled
        -- it): look again.
    END LOOP;
    RAISE EXCEPTION 'pgqueue.enqueue: unique key % kept changing hands', quote_literal(enqueue_unique.unique_key)
        USING ERRCODE = 'serialization_failure';
END
$fn$;

COMMENT ON FUNCTION {schema}.enqueue_unique(text, jsonb, text, integer, timestamptz, text, integer, text, timestamptz, interval, text[], text) IS
    'enqueue() under unique rules: called by enqueue() when unique_period, unique_states or unique_mode is given.';

-- enqueue_unique gets the same owner and grants: under SECURITY DEFINER enqueue() calls it
-- as the owner; without, as the caller, like enqueue() itself.
DO $restore$
DECLARE
    fns regprocedure[] := ARRAY[
        '{schema}.enqueue(text, jsonb, text, integer, timestamptz, text, integer, text, timestamptz, interval, text[], text)'::regprocedure,
        '{schema}.enqueue_unique(text, jsonb, text, integer, timestamptz, text, integer, text, timestamptz, interval, text[], text)'::regprocedure];
    fn regprocedure;
    v_owner text := current_setting('pgqueue.enqueue_owner', true);
    v_acl text := current_setting('pgqueue.enqueue_acl', true);
    r record;
BEGIN
    FOREACH fn IN ARRAY fns LOOP
        IF v_owner IS NOT NULL AND v_owner <> '' AND v_owner::regrole <> current_user::regrole THEN
            EXECUTE format('ALTER FUNCTION %s OWNER TO %s', fn, v_owner::regrole);
        END IF;
        -- An explicit ACL (the roles script revoked PUBLIC and granted the producer): the
        -- same EXECUTE grants again. None: the default, EXECUTE for PUBLIC, as a new one has.
        IF v_acl IS NOT NULL AND v_acl <> '' THEN
            EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', fn);
            FOR r IN
                SELECT DISTINCT a.grantee FROM pg_catalog.aclexplode(v_acl::aclitem[]) AS a
                WHERE a.privilege_type = 'EXECUTE'
            LOOP
                IF r.grantee = 0 THEN
                    EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO PUBLIC', fn);
                ELSE
                    EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s', fn, r.grantee::regrole);
                END IF;
            END LOOP;
        END IF;
    END LOOP;
    IF current_setting('pgqueue.enqueue_was_definer', true) = 'true' THEN
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER', fns[1]);
    END IF;
END
$restore$;

COMMENT ON FUNCTION {schema}.enqueue(text, jsonb, text, integer, timestamptz, text, integer, text, timestamptz, interval, text[], text) IS
    'Enqueue a job in the caller''s transaction; returns its id (or, under unique_key / the unique rules, the id of the job holding the key).';

-- -- cancel_job() and retry_job() (0006), carrying the new columns ----------------------
-- retry_job() also drops a deadline that has passed: an operator retrying an expired job
-- wants it to run.

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
             unique_key, created_at, started_at, finished_at, worker_id, errors, cancel_requested_at,
             concurrency_key, expires_at, snoozes, dedupe_key)
        SELECT id, queue, task, args, 'cancelled', priority, run_at, coalesce(scheduled_at, run_at),
               attempt, max_attempts, unique_key, created_at, started_at, now(), worker_id, errors, now(),
               concurrency_key, expires_at, snoozes, dedupe_key
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
         unique_key, created_at, started_at, finished_at, worker_id, errors, cancel_requested_at,
         concurrency_key, expires_at, snoozes, dedupe_key)
    SELECT id, queue, task, args, 'available', priority, now(), coalesce(scheduled_at, run_at), attempt,
           CASE WHEN max_attempts IS NULL THEN NULL ELSE greatest(max_attempts, attempt + 1) END,
           unique_key, created_at, started_at, NULL, worker_id, errors, NULL,
           concurrency_key, CASE WHEN expires_at > now() THEN expires_at END, snoozes, dedupe_key
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
    'Retry a discarded or cancelled job: it becomes available now, keeps its attempts and errors and gets one more attempt if it had none left; a deadline (expires_at) already past is dropped. Returns false if the job is not discarded or cancelled.';

-- -- views: expired jobs show as cancelled, with their reason ----------------------------

CREATE OR REPLACE VIEW {schema}.failures AS
WITH latest AS (
    SELECT id, task, errors -> -1 AS err
    FROM {schema}.jobs_live
    WHERE errors <> '[]'::jsonb
    UNION ALL
    SELECT id, task, errors -> -1 AS err
    FROM {schema}.jobs_discarded
    WHERE finished_at >= now() - interval '24 hours' AND finished_at < now() + interval '1 hour'
      AND errors <> '[]'::jsonb
    UNION ALL
    SELECT id, task, errors -> -1 AS err
    FROM {schema}.jobs_cancelled
    WHERE finished_at >= now() - interval '24 hours' AND finished_at < now() + interval '1 hour'
      AND errors <> '[]'::jsonb AND errors -> -1 ->> 'type' = 'pgqueue.Expired'
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
    'Recent failures grouped by task and error type. Covers live jobs that have failed at least once (retryable, or retried and waiting or running again), jobs discarded in the last 24 hours and jobs cancelled as expired (pgqueue.Expired: not started by their deadline) in the last 24 hours; each job counts once, under its latest error.';
COMMENT ON COLUMN {schema}.failures.error_type IS 'The exception''s qualified type (e.g. builtins.ValueError), LeaseExpired when the worker died or hung, or pgqueue.Expired when the job was not started by its deadline.';

CREATE OR REPLACE VIEW {schema}.queue_stats AS
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
           count(*) FILTER (WHERE state = 'discarded') AS discarded_15m,
           count(*) FILTER (WHERE state = 'cancelled' AND finished_at >= now() - interval '1 minute') AS cancelled_1m,
           count(*) FILTER (WHERE state = 'cancelled' AND finished_at >= now() - interval '5 minutes') AS cancelled_5m,
           count(*) FILTER (WHERE state = 'cancelled') AS cancelled_15m,
           count(*) FILTER (WHERE expired) AS expired_15m
    FROM (
        SELECT queue, state, finished_at, false AS expired FROM {schema}.jobs_completed
        WHERE finished_at >= now() - interval '15 minutes' AND finished_at < now() + interval '1 hour'
        UNION ALL
        SELECT queue, state, finished_at, false AS expired FROM {schema}.jobs_discarded
        WHERE finished_at >= now() - interval '15 minutes' AND finished_at < now() + interval '1 hour'
        UNION ALL
        SELECT queue, state, finished_at, coalesce(errors -> -1 ->> 'type' = 'pgqueue.Expired', false) AS expired
        FROM {schema}.jobs_cancelled
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
           coalesce(x.failed_attempts_5m, 0) AS failed_attempts_5m,
           coalesce(f.cancelled_1m, 0) AS cancelled_1m,
           coalesce(f.cancelled_5m, 0) AS cancelled_5m,
           coalesce(f.cancelled_15m, 0) AS cancelled_15m,
           coalesce(f.expired_15m, 0) AS expired_15m
    FROM live AS l
    FULL JOIN finished AS f ON f.queue = l.queue
    LEFT JOIN failed AS x ON x.queue = coalesce(l.queue, f.queue)
)
SELECT queue, available, scheduled, running, retryable, lag_seconds,
       completed_1m, completed_5m, completed_15m, discarded_1m, discarded_5m, discarded_15m,
       failed_attempts_5m,
       CASE WHEN failed_attempts_5m + completed_5m = 0 THEN 0::float8
            ELSE failed_attempts_5m::float8 / (failed_attempts_5m + completed_5m) END AS failure_rate_5m,
       cancelled_1m, cancelled_5m, cancelled_15m, expired_15m
FROM merged;

COMMENT ON VIEW {schema}.queue_stats IS
    'One row per queue that has live jobs or finished jobs in the last 15 minutes: depth, lag, throughput, failures, cancellations and expiries.';
COMMENT ON COLUMN {schema}.queue_stats.cancelled_1m IS 'Jobs cancelled in the last minute (by a handler, an operator, or as expired).';
COMMENT ON COLUMN {schema}.queue_stats.cancelled_5m IS 'Jobs cancelled in the last 5 minutes.';
COMMENT ON COLUMN {schema}.queue_stats.cancelled_15m IS 'Jobs cancelled in the last 15 minutes.';
COMMENT ON COLUMN {schema}.queue_stats.expired_15m IS 'Of cancelled_15m, the jobs cancelled because they were not started by their deadline (expires_at; error type pgqueue.Expired).';
