-- pgqueue schema, version 8: flow control, decided in the claim.
--
-- What a worker may start is decided by the claim itself, in the claim's transaction, on
-- the database clock:
--   queues        one row per queue that a worker served or an operator configured: paused,
--                 and the limits that apply to it (NULL: none).
--   task_limits   at most N running jobs of a task, across every node and queue.
--   rate_starts   the recent starts of each rate-limited scope (a queue, or a key within a
--                 queue): a sliding window, counted exactly.
--
-- A claim that may start a job of a controlled queue or a limited task first takes one
-- transaction-scoped advisory lock per such scope, in one global order (claim_lock), and
-- only then picks, in a later statement of the same transaction (claim_pick): its snapshot
-- is taken after the lock, so it counts every job the previous holder of the lock started.
-- Limits count rows in state 'running', which a job leaves only when its outcome is
-- written, its lease is rescued or it is released: a dead worker's slots come back when
-- the rescuer takes its jobs, and cannot leak.
--
-- Queues and tasks without controls never take those locks: the plain claims skip
-- controlled queues and limited tasks (one probe of each small table per claim), so a
-- limit set by an operator binds every claim that starts after it commits.

-- -- indexes --------------------------------------------------------------------------------

-- The timers index now leads with the state, so that the running jobs are one range of it:
-- a limited queue's claim counts them there. The scheduler scans the 'scheduled' and
-- 'retryable' ranges and the rescuer the 'running' range, each in timer order as before.
DROP INDEX {schema}.jobs_live_timers;
CREATE INDEX jobs_live_timers ON {schema}.jobs_live
    (state, (CASE WHEN state = 'running' THEN lease_expires_at ELSE run_at END))
    WHERE state IN ('scheduled', 'retryable', 'running');

-- Jobs with a concurrency key, by queue, state and key: the running jobs of each key, the
-- keys that have available jobs, and one key's jobs in enqueue order are each one range.
-- Only jobs that carry a key enter it.
CREATE INDEX jobs_live_keyed ON {schema}.jobs_live (queue, state, concurrency_key, id)
    WHERE concurrency_key IS NOT NULL;

-- -- tables ---------------------------------------------------------------------------------

CREATE TABLE {schema}.queues (
    name            text        PRIMARY KEY,
    paused          boolean     NOT NULL DEFAULT false,
    concurrency     integer,
    key_concurrency integer,
    key_fifo        boolean     NOT NULL DEFAULT false,
    rate_limit      integer,
    rate_period     interval,
    key_rate_limit  integer,
    key_rate_period interval,
    created_at      timestamptz NOT NULL DEFAULT now(),
    changed_at      timestamptz,
    controlled      boolean GENERATED ALWAYS AS (
        paused OR concurrency IS NOT NULL OR key_concurrency IS NOT NULL OR key_fifo
        OR rate_limit IS NOT NULL OR key_rate_limit IS NOT NULL) STORED,
    CONSTRAINT queues_name CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{{0,63}}$'),
    CONSTRAINT queues_concurrency CHECK (concurrency BETWEEN 1 AND 1000000),
    CONSTRAINT queues_key_concurrency CHECK (key_concurrency BETWEEN 1 AND 1000000),
    CONSTRAINT queues_key_fifo CHECK (NOT key_fifo OR key_concurrency = 1),
    CONSTRAINT queues_rate CHECK ((rate_limit IS NULL) = (rate_period IS NULL)),
    CONSTRAINT queues_rate_limit CHECK (rate_limit BETWEEN 1 AND 1000000),
    CONSTRAINT queues_rate_period CHECK (rate_period BETWEEN interval '1 millisecond' AND interval '7 days'),
    CONSTRAINT queues_key_rate CHECK ((key_rate_limit IS NULL) = (key_rate_period IS NULL)),
    CONSTRAINT queues_key_rate_limit CHECK (key_rate_limit BETWEEN 1 AND 1000000),
    CONSTRAINT queues_key_rate_period CHECK (key_rate_period BETWEEN interval '1 millisecond' AND interval '7 days')
);
COMMENT ON TABLE {schema}.queues IS
    'Queues workers serve or operators configured: paused, and the limits the claim enforces (NULL: none). Change it with pause_queue(), resume_queue(), set_queue_limit(), set_queue_rate(), set_key_limit(), set_key_rate().';

CREATE TABLE {schema}.task_limits (
    task        text        PRIMARY KEY,
    concurrency integer     NOT NULL,
    changed_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT task_limits_task CHECK (task ~ '^[A-Za-z_][A-Za-z0-9_.:-]{{0,199}}$'),
    CONSTRAINT task_limits_concurrency CHECK (concurrency BETWEEN 1 AND 1000000)
);
COMMENT ON TABLE {schema}.task_limits IS
    'At most this many running jobs of a task, across every node and queue. Change it with set_task_limit().';

-- One row per start of a rate-limited scope ('q:<queue>' or 'k:<queue>:<key>'), kept for
-- the scope's period; each claim prunes the scopes it touches.
CREATE TABLE {schema}.rate_starts (
    scope text        NOT NULL,
    at    timestamptz NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
CREATE INDEX rate_starts_scope_at ON {schema}.rate_starts (scope, at);

-- Workers set up by the roles script of an earlier version (they may UPDATE jobs_live) get
-- what the worker needs of the new tables now, so that they keep working before the roles
-- script is run again: recording the queues they serve, and the rate windows.
DO $grants$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee::regrole AS grantee
        FROM pg_catalog.pg_class AS c
        CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) AS a
        WHERE c.oid = '{schema}.jobs_live'::regclass AND a.privilege_type = 'UPDATE'
          AND a.grantee <> 0 AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT INSERT ON %s TO %s', '{schema}.queues'::regclass, r.grantee);
        EXECUTE format('GRANT INSERT, DELETE ON %s TO %s', '{schema}.rate_starts'::regclass, r.grantee);
    END LOOP;
END
$grants$;

-- -- operator functions ---------------------------------------------------------------------
-- Each validates its input (a clear error and no effect otherwise), refuses a queue nobody
-- knows (no worker served it and no job is in it: add_queue() first), records the change
-- and wakes every worker ('*flow' on the wake-up channel: not a queue name).

CREATE FUNCTION {schema}.add_queue(queue text) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_added boolean;
BEGIN
    IF queue IS NULL OR queue !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{{0,63}}$' THEN
        RAISE EXCEPTION 'pgqueue: invalid queue name %', coalesce(quote_literal(queue), 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'queue names are 1-64 characters: letters, digits, _ . : -';
    END IF;
    INSERT INTO {schema}.queues (name) VALUES (add_queue.queue) ON CONFLICT (name) DO NOTHING
    RETURNING true INTO v_added;
    RETURN coalesce(v_added, false);
END
$fn$;

-- The row of a known queue, locked for the change; raises for an unknown one.
CREATE FUNCTION {schema}.queue_for_change(queue text) RETURNS {schema}.queues
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_row {schema}.queues;
BEGIN
    IF queue IS NULL OR queue !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{{0,63}}$' THEN
        RAISE EXCEPTION 'pgqueue: invalid queue name %', coalesce(quote_literal(queue), 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'queue names are 1-64 characters: letters, digits, _ . : -';
    END IF;
    IF NOT EXISTS (SELECT FROM {schema}.queues AS q WHERE q.name = queue_for_change.queue)
       AND EXISTS (SELECT FROM {schema}.jobs_live AS j WHERE j.queue = queue_for_change.queue) THEN
        INSERT INTO {schema}.queues (name) VALUES (queue_for_change.queue) ON CONFLICT (name) DO NOTHING;
    END IF;
    SELECT * INTO v_row FROM {schema}.queues AS q WHERE q.name = queue_for_change.queue FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgqueue: unknown queue %', quote_literal(queue)
            USING ERRCODE = 'undefined_object',
                  HINT = 'no worker has served it and no job is in it; add it first: SELECT pgqueue.add_queue(...), or pgqueue queues add';
    END IF;
    RETURN v_row;
END
$fn$;

CREATE FUNCTION {schema}.flow_changed(queue text) RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
    UPDATE {schema}.queues AS q SET changed_at = now() WHERE q.name = flow_changed.queue;
    SELECT pg_notify({channel}, '*flow');
$fn$;

CREATE FUNCTION {schema}.pause_queue(queue text) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_row {schema}.queues := {schema}.queue_for_change(queue);
BEGIN
    IF v_row.paused THEN
        RETURN false;
    END IF;
    UPDATE {schema}.queues AS q SET paused = true WHERE q.name = pause_queue.queue;
    PERFORM {schema}.flow_changed(queue);
    RETURN true;
END
$fn$;
COMMENT ON FUNCTION {schema}.pause_queue(text) IS
    'Stop every worker starting jobs of this queue (running ones finish); true if it was running.';

CREATE FUNCTION {schema}.resume_queue(queue text) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_row {schema}.queues := {schema}.queue_for_change(queue);
BEGIN
    IF NOT v_row.paused THEN
        RETURN false;
    END IF;
    UPDATE {schema}.queues AS q SET paused = false WHERE q.name = resume_queue.queue;
    PERFORM {schema}.flow_changed(queue);
    -- Wake the queue's workers too: its jobs are claimable again.
    PERFORM pg_notify({channel}, queue);
    RETURN true;
END
$fn$;
COMMENT ON FUNCTION {schema}.resume_queue(text) IS
    'Let workers start jobs of this queue again; true if it was paused.';

-- Checks shared by the setters: a limit is 1..1,000,000 (NULL removes it), a period is
-- 1 ms .. 7 days and comes with its limit.
CREATE FUNCTION {schema}.check_limit(what text, n integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF n IS NOT NULL AND (n < 1 OR n > 1000000) THEN
        RAISE EXCEPTION 'pgqueue: % must be between 1 and 1000000, got %', what, n
            USING ERRCODE = 'invalid_parameter_value', HINT = 'NULL removes the limit';
    END IF;
END
$fn$;

CREATE FUNCTION {schema}.check_rate(what text, n integer, period interval) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM {schema}.check_limit(what, n);
    IF (n IS NULL) <> (period IS NULL) THEN
        RAISE EXCEPTION 'pgqueue: % needs both a limit and a period (or neither, to remove it)', what
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF period IS NOT NULL AND NOT (period BETWEEN interval '1 millisecond' AND interval '7 days') THEN
        RAISE EXCEPTION 'pgqueue: % period must be between 1 millisecond and 7 days, got %', what, period
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$fn$;

CREATE FUNCTION {schema}.set_queue_limit(queue text, concurrency integer) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM {schema}.check_limit('concurrency', concurrency);
    PERFORM {schema}.queue_for_change(queue);
    UPDATE {schema}.queues AS q SET concurrency = set_queue_limit.concurrency WHERE q.name = set_queue_limit.queue;
    PERFORM {schema}.flow_changed(queue);
END
$fn$;
COMMENT ON FUNCTION {schema}.set_queue_limit(text, integer) IS
    'At most this many running jobs of the queue across every node (NULL: no limit).';

CREATE FUNCTION {schema}.set_queue_rate(queue text, rate_limit integer, period interval) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM {schema}.check_rate('rate', rate_limit, period);
    PERFORM {schema}.queue_for_change(queue);
    UPDATE {schema}.queues AS q SET rate_limit = set_queue_rate.rate_limit, rate_period = set_queue_rate.period
    WHERE q.name = set_queue_rate.queue;
    PERFORM {schema}.flow_changed(queue);
END
$fn$;
COMMENT ON FUNCTION {schema}.set_queue_rate(text, integer, interval) IS
    'At most rate_limit starts of the queue''s jobs in any window of length period, across every node (NULLs: no limit).';

CREATE FUNCTION {schema}.set_key_limit(queue text, concurrency integer, fifo boolean DEFAULT false) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM {schema}.check_limit('key concurrency', concurrency);
    IF coalesce(fifo, false) AND concurrency IS DISTINCT FROM 1 THEN
        RAISE EXCEPTION 'pgqueue: fifo needs a key concurrency of 1, got %', coalesce(concurrency::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'strict FIFO per key runs one job of a key at a time';
    END IF;
    PERFORM {schema}.queue_for_change(queue);
    UPDATE {schema}.queues AS q
    SET key_concurrency = set_key_limit.concurrency, key_fifo = coalesce(set_key_limit.fifo, false)
    WHERE q.name = set_key_limit.queue;
    PERFORM {schema}.flow_changed(queue);
END
$fn$;
COMMENT ON FUNCTION {schema}.set_key_limit(text, integer, boolean) IS
    'At most this many running jobs per concurrency key in the queue (NULL: no limit); fifo: a key''s jobs start one at a time in enqueue order, each after the previous one finished.';

CREATE FUNCTION {schema}.set_key_rate(queue text, rate_limit integer, period interval) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM {schema}.check_rate('key rate', rate_limit, period);
    PERFORM {schema}.queue_for_change(queue);
    UPDATE {schema}.queues AS q SET key_rate_limit = set_key_rate.rate_limit, key_rate_period = set_key_rate.period
    WHERE q.name = set_key_rate.queue;
    PERFORM {schema}.flow_changed(queue);
END
$fn$;
COMMENT ON FUNCTION {schema}.set_key_rate(text, integer, interval) IS
    'At most rate_limit starts per concurrency key of the queue in any window of length period (NULLs: no limit).';

CREATE FUNCTION {schema}.set_task_limit(task text, concurrency integer) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF task IS NULL OR task !~ '^[A-Za-z_][A-Za-z0-9_.:-]{{0,199}}$' THEN
        RAISE EXCEPTION 'pgqueue: invalid task name %', coalesce(quote_literal(task), 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'task names are 1-200 characters: letters, digits, _ . : -, starting with a letter or _';
    END IF;
    PERFORM {schema}.check_limit('concurrency', concurrency);
    IF concurrency IS NULL THEN
        DELETE FROM {schema}.task_limits AS t WHERE t.task = set_task_limit.task;
    ELSE
        INSERT INTO {schema}.task_limits AS t (task, concurrency) VALUES (set_task_limit.task, set_task_limit.concurrency)
        ON CONFLICT ON CONSTRAINT task_limits_pkey DO UPDATE SET concurrency = excluded.concurrency, changed_at = now();
    END IF;
    PERFORM pg_notify({channel}, '*flow');
END
$fn$;
COMMENT ON FUNCTION {schema}.set_task_limit(text, integer) IS
    'At most this many running jobs of the task across every node and queue (NULL: no limit).';

-- -- the limited claim ----------------------------------------------------------------------

-- Step 1 of a limited claim: lock every controlled queue among p_queues and every limited
-- task among p_tasks (transaction-scoped advisory locks on p_prefix || 'q:' || queue and
-- p_prefix || 't:' || task, always in the same order, so claims cannot deadlock), and note
-- which scopes are held for claim_pick. Returns how many locks were taken.
CREATE FUNCTION {schema}.claim_lock(p_queues text[], p_tasks text[], p_prefix text) RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_scope text;
    v_held text[] := '{{}}';
BEGIN
    FOR v_scope IN
        SELECT 'q:' || q.name FROM {schema}.queues AS q WHERE q.name = ANY(p_queues) AND q.controlled
        UNION
        SELECT 't:' || t.task FROM {schema}.task_limits AS t WHERE t.task = ANY(p_tasks)
        ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(hashtextextended(p_prefix || v_scope, 0));
        v_held := v_held || v_scope;
    END LOOP;
    PERFORM set_config('pgqueue.claim_scopes', v_held::text, true);
    RETURN cardinality(v_held);
END
$fn$;

-- Step 2, in a later statement of the same transaction (a fresh snapshot, taken under the
-- locks): pick up to p_limit available jobs of p_queues (at most p_queue_free[i] of the
-- i-th; NULL: no cap of its own) and p_tasks that every control allows, lock them, record
-- their starts in the rate windows, and return (id, started_at) for each. What it learnt
-- of each queue is left for the rest of the transaction in pgqueue.claim_hints, a JSON
-- array of objects (queue, wait, blocked, key_cursor):
--   wait:       seconds until a full rate window frees a start (null: not rate-bound);
--   blocked:    available jobs are waiting that the queue's limits hold back;
--   key_cursor: the last concurrency key visited (keys take turns: the next claim of this
--               process starts after it).
-- A controlled queue or limited task whose lock this transaction does not hold (it became
-- controlled after claim_lock ran) is left alone this time.
CREATE FUNCTION {schema}.claim_pick(
    p_queues text[],
    p_queue_free integer[],
    p_tasks text[],
    p_limit integer,
    p_key_cursors text[]
) RETURNS TABLE (id bigint, started_at timestamptz)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_held text[] := coalesce(nullif(current_setting('pgqueue.claim_scopes', true), ''), '{{}}')::text[];
    v_now timestamptz := clock_timestamp();
    v_left integer := greatest(p_limit, 0);
    v_ltask text[] := '{{}}';     -- limited tasks among p_tasks ...
    v_lallow integer[] := '{{}}'; -- ... and how many more of each may start
    v_free_tasks text[];          -- tasks without a limit
    v_tasks text[];               -- tasks claimable in the current queue
    q {schema}.queues;
    v_q text;             -- the current queue's name
    i integer;
    k integer;
    v_local integer;              -- what this process has room for in the current queue
    v_allow integer;
    v_key_allow integer;
    v_starts integer;
    v_oldest timestamptz;
    v_wait float8;
    v_blocked boolean;
    v_ids bigint[];
    v_keys text[];
    v_task_of text[];
    v_cursor text;
    v_start_key text;
    v_key text;
    v_wrapped boolean;
    v_visits integer;
    v_running jsonb;
    v_head bigint;
    v_picked bigint[];
    v_picked_tasks text[];
    v_all bigint[] := '{{}}';
    v_hints jsonb := '[]';
BEGIN
    -- Limited tasks: how many more may start. One whose lock we lack may start none.
    SELECT coalesce(array_agg(t.task ORDER BY t.task), '{{}}'),
           coalesce(array_agg(CASE WHEN ('t:' || t.task) = ANY(v_held)
                                   THEN greatest(t.concurrency - (
                                       SELECT count(*) FROM {schema}.jobs_live AS j
                                       WHERE j.state = 'running' AND j.task = t.task), 0)::integer
                                   ELSE 0 END ORDER BY t.task), '{{}}')
    INTO v_ltask, v_lallow
    FROM {schema}.task_limits AS t
    WHERE t.task = ANY(p_tasks);
    v_free_tasks := ARRAY(SELECT x FROM unnest(p_tasks) AS x WHERE x <> ALL(v_ltask));

    FOR i IN 1 .. coalesce(array_length(p_queues, 1), 0) LOOP
        EXIT WHEN v_left <= 0;
        v_q := p_queues[i];
        SELECT * INTO q FROM {schema}.queues AS s WHERE s.name = v_q;
        IF FOUND AND q.controlled AND NOT (('q:' || v_q) = ANY(v_held)) THEN
            CONTINUE;  -- became controlled after our locks were taken
        END IF;
        IF FOUND AND q.paused THEN
            CONTINUE;
        END IF;
        v_tasks := v_free_tasks || ARRAY(
            SELECT v_ltask[n] FROM generate_subscripts(v_ltask, 1) AS n WHERE v_lallow[n] > 0);
        CONTINUE WHEN cardinality(v_tasks) = 0;
        v_local := least(coalesce(p_queue_free[i], v_left), v_left);
        v_allow := v_local;
        v_wait := NULL;
        v_blocked := false;
        v_cursor := p_key_cursors[i];

        IF q.concurrency IS NOT NULL THEN
            v_allow := least(v_allow, q.concurrency - (
                SELECT count(*) FROM {schema}.jobs_live AS j WHERE j.state = 'running' AND j.queue = v_q)::integer);
        END IF;
        IF q.rate_limit IS NOT NULL THEN
            SELECT count(*), min(r.at) INTO v_starts, v_oldest
            FROM {schema}.rate_starts AS r
            WHERE r.scope = 'q:' || v_q AND r.at > v_now - q.rate_period;
            IF v_starts >= q.rate_limit THEN
                v_wait := greatest(extract(epoch FROM v_oldest + q.rate_period - v_now), 0.001);
            END IF;
            v_allow := least(v_allow, q.rate_limit - v_starts);
        END IF;

        v_picked := '{{}}';
        v_picked_tasks := '{{}}';
        IF v_allow > 0 AND q.key_concurrency IS NULL AND q.key_rate_limit IS NULL THEN
            -- No per-key control: the queue's order, with each limited task capped.
            SELECT coalesce(array_agg(c.id ORDER BY c.o1, c.o2, c.id), '{{}}'),
                   coalesce(array_agg(c.task ORDER BY c.o1, c.o2, c.id), '{{}}')
            INTO v_picked, v_picked_tasks
            FROM (
                SELECT p.id, p.task, p.o1, p.o2
                FROM (
                    SELECT x.cap, x.tasks
                    FROM (SELECT v_allow AS cap, v_free_tasks AS tasks) AS x
                    WHERE cardinality(x.tasks) > 0
                    UNION ALL
                    SELECT least(v_lallow[n], v_allow), ARRAY[v_ltask[n]]
                    FROM generate_subscripts(v_ltask, 1) AS n
                    WHERE v_lallow[n] > 0
                ) AS g
                CROSS JOIN LATERAL (
                    SELECT j.id, j.task, (-j.priority::integer) AS o1, j.run_at AS o2
                    FROM {schema}.jobs_live AS j
                    WHERE j.state = 'available' AND j.queue = v_q AND j.task = ANY(g.tasks)
                      AND (j.expires_at IS NULL OR j.expires_at > v_now)
                    ORDER BY (-j.priority::integer), j.run_at, j.id
                    LIMIT g.cap
                    FOR UPDATE SKIP LOCKED
                ) AS p
                ORDER BY p.o1, p.o2, p.id
                LIMIT v_allow
            ) AS c;
        ELSIF v_allow > 0 THEN
            -- Per-key control: keys take turns, starting after this process's cursor; a
            -- key at its limit is skipped in one index probe, so it never holds up others.
            SELECT coalesce(jsonb_object_agg(g.concurrency_key, g.n), '{{}}')
            INTO v_running
            FROM (SELECT j.concurrency_key, count(*) AS n
                  FROM {schema}.jobs_live AS j
                  WHERE j.queue = v_q AND j.state = 'running' AND j.concurrency_key IS NOT NULL
                  GROUP BY j.concurrency_key) AS g;
            v_start_key := coalesce(v_cursor, '');
            v_key := v_start_key;
            v_wrapped := false;
            v_visits := 0;
            LOOP
                EXIT WHEN v_allow <= 0 OR v_visits >= 1000;
                SELECT min(j.concurrency_key) INTO v_cursor
                FROM {schema}.jobs_live AS j
                WHERE j.queue = v_q AND j.state = 'available' AND j.concurrency_key > v_key;
                IF v_cursor IS NULL THEN
                    EXIT WHEN v_wrapped OR v_start_key = '';
                    v_wrapped := true;
                    v_key := '';
                    CONTINUE;
                END IF;
                EXIT WHEN v_wrapped AND v_cursor > v_start_key;
                v_key := v_cursor;
                v_visits := v_visits + 1;
                v_key_allow := v_allow;
                IF q.key_concurrency IS NOT NULL THEN
                    v_key_allow := least(v_key_allow, q.key_concurrency - coalesce((v_running ->> v_key)::integer, 0));
                END IF;
                IF v_key_allow > 0 AND q.key_rate_limit IS NOT NULL THEN
                    SELECT count(*), min(r.at) INTO v_starts, v_oldest
                    FROM {schema}.rate_starts AS r
                    WHERE r.scope = 'k:' || v_q || ':' || v_key AND r.at > v_now - q.key_rate_period;
                    IF v_starts >= q.key_rate_limit THEN
                        v_wait := least(coalesce(v_wait, 'Infinity'),
                                        greatest(extract(epoch FROM v_oldest + q.key_rate_period - v_now), 0.001));
                    END IF;
                    v_key_allow := least(v_key_allow, q.key_rate_limit - v_starts);
                END IF;
                IF v_key_allow > 0 AND q.key_fifo THEN
                    -- Strictly in enqueue order: only the key's oldest live job may start,
                    -- and only once every earlier job of the key has finished.
                    SELECT min(j.id) INTO v_head
                    FROM {schema}.jobs_live AS j
                    WHERE j.queue = v_q AND j.state = 'available' AND j.concurrency_key = v_key;
                    IF EXISTS (SELECT FROM {schema}.jobs_live AS j
                               WHERE j.queue = v_q AND j.state IN ('scheduled', 'running', 'retryable')
                                 AND j.concurrency_key = v_key AND j.id < v_head) THEN
                        v_key_allow := 0;
                    END IF;
                END IF;
                IF v_key_allow <= 0 THEN
                    v_blocked := true;
                    CONTINUE;
                END IF;
                SELECT coalesce(array_agg(p.id ORDER BY p.id), '{{}}'), coalesce(array_agg(p.task ORDER BY p.id), '{{}}')
                INTO v_ids, v_task_of
                FROM (
                    SELECT j.id, j.task
                    FROM {schema}.jobs_live AS j
                    WHERE j.queue = v_q AND j.state = 'available' AND j.concurrency_key = v_key
                      AND j.task = ANY(v_tasks) AND (j.expires_at IS NULL OR j.expires_at > v_now)
                      AND (NOT q.key_fifo OR j.id = v_head)
                    ORDER BY j.id
                    LIMIT v_key_allow
                    FOR UPDATE SKIP LOCKED
                ) AS p;
                v_picked := v_picked || v_ids;
                v_picked_tasks := v_picked_tasks || v_task_of;
                v_allow := v_allow - cardinality(v_ids);
                IF q.key_rate_limit IS NOT NULL AND cardinality(v_ids) > 0 THEN
                    INSERT INTO {schema}.rate_starts (scope, at)
                    SELECT 'k:' || v_q || ':' || v_key, v_now FROM generate_series(1, cardinality(v_ids));
                    DELETE FROM {schema}.rate_starts AS r
                    WHERE r.scope = 'k:' || v_q || ':' || v_key AND r.at <= v_now - q.key_rate_period;
                END IF;
            END LOOP;
            v_cursor := nullif(v_key, '');
            IF v_allow > 0 THEN
                -- Jobs without a key are not limited per key: the queue's order.
                SELECT v_picked || coalesce(array_agg(p.id), '{{}}'), v_picked_tasks || coalesce(array_agg(p.task), '{{}}')
                INTO v_picked, v_picked_tasks
                FROM (
                    SELECT j.id, j.task
                    FROM {schema}.jobs_live AS j
                    WHERE j.state = 'available' AND j.queue = v_q AND j.concurrency_key IS NULL
                      AND j.task = ANY(v_tasks) AND (j.expires_at IS NULL OR j.expires_at > v_now)
                    ORDER BY (-j.priority::integer), j.run_at, j.id
                    LIMIT v_allow
                    FOR UPDATE SKIP LOCKED
                ) AS p;
            END IF;
        END IF;

        -- Limited tasks: take the picks off their allowance; a task over it (two keys
        -- picked the same task) gives back its surplus, the latest picks first.
        IF cardinality(v_picked) > 0 AND cardinality(v_ltask) > 0 THEN
            SELECT coalesce(array_agg(p.id ORDER BY p.ord), '{{}}'), coalesce(array_agg(p.task ORDER BY p.ord), '{{}}')
            INTO v_picked, v_picked_tasks
            FROM (
                SELECT x.id, x.task, x.ord,
                       row_number() OVER (PARTITION BY x.task ORDER BY x.ord) AS rn
                FROM unnest(v_picked, v_picked_tasks) WITH ORDINALITY AS x(id, task, ord)
            ) AS p
            LEFT JOIN generate_subscripts(v_ltask, 1) AS n ON v_ltask[n] = p.task
            WHERE n IS NULL OR p.rn <= v_lallow[n];
            FOR k IN 1 .. cardinality(v_ltask) LOOP
                v_lallow[k] := v_lallow[k] - (SELECT count(*) FROM unnest(v_picked_tasks) AS t WHERE t = v_ltask[k])::integer;
            END LOOP;
        END IF;

        IF q.rate_limit IS NOT NULL AND cardinality(v_picked) > 0 THEN
            INSERT INTO {schema}.rate_starts (scope, at)
            SELECT 'q:' || v_q, v_now FROM generate_series(1, cardinality(v_picked));
            DELETE FROM {schema}.rate_starts AS r WHERE r.scope = 'q:' || v_q AND r.at <= v_now - q.rate_period;
        END IF;
        -- Fewer picked than this process had room for, while jobs it runs still wait: the
        -- limits hold them back (a finishing job of the queue frees a slot for them).
        IF NOT v_blocked AND cardinality(v_picked) < v_local THEN
            v_blocked := EXISTS (SELECT FROM {schema}.jobs_live AS j
                                 WHERE j.state = 'available' AND j.queue = v_q AND j.task = ANY(p_tasks)
                                   AND j.id <> ALL(v_picked));
        END IF;
        v_all := v_all || v_picked;
        v_left := v_left - cardinality(v_picked);
        v_hints := v_hints || jsonb_build_object(
            'queue', v_q, 'wait', v_wait, 'blocked', v_blocked, 'key_cursor', v_cursor);
    END LOOP;

    PERFORM set_config('pgqueue.claim_hints', v_hints::text, true);
    RETURN QUERY SELECT x.id, v_now FROM unnest(v_all) AS x(id);
END
$fn$;

-- -- views ----------------------------------------------------------------------------------

CREATE VIEW {schema}.queue_controls AS
SELECT q.name AS queue,
       q.paused,
       q.concurrency,
       (SELECT count(*) FROM {schema}.jobs_live AS j WHERE j.state = 'running' AND j.queue = q.name) AS running,
       q.key_concurrency,
       q.key_fifo,
       q.rate_limit,
       extract(epoch FROM q.rate_period)::float8 AS rate_period_seconds,
       (SELECT count(*) FROM {schema}.rate_starts AS r
        WHERE r.scope = 'q:' || q.name AND r.at > now() - q.rate_period) AS starts_in_window,
       q.key_rate_limit,
       extract(epoch FROM q.key_rate_period)::float8 AS key_rate_period_seconds,
       q.changed_at
FROM {schema}.queues AS q;
COMMENT ON VIEW {schema}.queue_controls IS
    'Every known queue: paused, its limits (NULL: none), the running jobs they count and the starts in the current rate window.';

CREATE VIEW {schema}.task_controls AS
SELECT t.task,
       t.concurrency,
       (SELECT count(*) FROM {schema}.jobs_live AS j WHERE j.state = 'running' AND j.task = t.task) AS running,
       t.changed_at
FROM {schema}.task_limits AS t;
COMMENT ON VIEW {schema}.task_controls IS 'Task concurrency limits and the running jobs they count.';
