-- pgqueue schema, version 10: cheaper plans for the limited claim.
--
-- Measured with a hot concurrency key saturated and thousands of keyed jobs waiting, the
-- limited claim spent its time in three places, each fixed here without changing what it
-- may start:
--   * claim_pick() was planned as returning 1,000 rows (a function's default), so the claim
--     joined its handful of ids to jobs_live with a hash join over a scan of the whole live
--     table. It now says ROWS 10: a nested loop over the primary key.
--   * the next key and a key's head job are read as ORDER BY ... LIMIT 1 along the keyed
--     index, in its column order, instead of min() aggregates.
--   * in a queue with per-key controls, the search for jobs without a key walked every keyed
--     available job (no index holds only the unkeyed ones, and one would cost every plain
--     queue a write). It now runs only when the caller asks (p_unkeyed[i], NULL: yes); a
--     worker asks at every claim while that search finds jobs, and otherwise about once a
--     second (pgqueue.worker.flow).
--   * the rate windows kept one row per start; they keep one row per claim and scope, with
--     the number of starts it made (n).

ALTER TABLE {schema}.rate_starts ADD COLUMN n integer NOT NULL DEFAULT 1
    CONSTRAINT rate_starts_n CHECK (n >= 1);

-- Step 2, in a later statement of the same transaction (a fresh snapshot, taken under the
-- locks): pick up to p_limit available jobs of p_queues (at most p_queue_free[i] of the
-- i-th; NULL: no cap of its own) and p_tasks that every control allows, lock them, record
-- their starts in the rate windows, and return (id, started_at) for each. What it learnt
-- of each queue is left for the rest of the transaction in pgqueue.claim_hints, a JSON
-- array of objects (queue, wait, blocked, key_cursor, unkeyed):
--   wait:       seconds until a full rate window frees a start (null: not rate-bound);
--   blocked:    available jobs are waiting that the queue's limits hold back;
--   key_cursor: the last concurrency key visited (keys take turns: the next claim of this
--               process starts after it);
--   unkeyed:    in a queue with per-key controls, whether it looked for jobs without a key
--               (only when p_unkeyed[i] asks: that search walks the queue's keyed jobs) and
--               found any (null: did not look).
-- A controlled queue or limited task whose lock this transaction does not hold (it became
-- controlled after claim_lock ran) is left alone this time.
CREATE FUNCTION {schema}.claim_pick(
    p_queues text[],
    p_queue_free integer[],
    p_tasks text[],
    p_limit integer,
    p_key_cursors text[],
    p_unkeyed boolean[]
) RETURNS TABLE (id bigint, started_at timestamptz)
LANGUAGE plpgsql VOLATILE
ROWS 10
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
    v_unkeyed boolean;
    v_keyed integer;
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
        v_unkeyed := NULL;

        IF q.concurrency IS NOT NULL THEN
            v_allow := least(v_allow, q.concurrency - (
                SELECT count(*) FROM {schema}.jobs_live AS j WHERE j.state = 'running' AND j.queue = v_q)::integer);
        END IF;
        IF q.rate_limit IS NOT NULL THEN
            SELECT coalesce(sum(r.n), 0), min(r.at) INTO v_starts, v_oldest
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
                v_cursor := (SELECT j.concurrency_key
                             FROM {schema}.jobs_live AS j
                             WHERE j.queue = v_q AND j.state = 'available' AND j.concurrency_key > v_key
                             ORDER BY j.queue, j.state, j.concurrency_key
                             LIMIT 1);
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
                    SELECT coalesce(sum(r.n), 0), min(r.at) INTO v_starts, v_oldest
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
                    v_head := (SELECT j.id
                               FROM {schema}.jobs_live AS j
                               WHERE j.queue = v_q AND j.state = 'available' AND j.concurrency_key = v_key
                               ORDER BY j.queue, j.state, j.concurrency_key, j.id
                               LIMIT 1);
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
                    INSERT INTO {schema}.rate_starts (scope, at, n)
                    VALUES ('k:' || v_q || ':' || v_key, v_now, cardinality(v_ids));
                    DELETE FROM {schema}.rate_starts AS r
                    WHERE r.scope = 'k:' || v_q || ':' || v_key AND r.at <= v_now - q.key_rate_period;
                END IF;
            END LOOP;
            v_cursor := nullif(v_key, '');
            IF v_allow > 0 AND coalesce(p_unkeyed[i], true) THEN
                -- Jobs without a key are not limited per key: the queue's order. Only when
                -- asked: in a queue of keyed jobs this walks past all of them.
                v_keyed := cardinality(v_picked);
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
                v_unkeyed := cardinality(v_picked) > v_keyed;
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
            INSERT INTO {schema}.rate_starts (scope, at, n) VALUES ('q:' || v_q, v_now, cardinality(v_picked));
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
            'queue', v_q, 'wait', v_wait, 'blocked', v_blocked, 'key_cursor', v_cursor, 'unkeyed', v_unkeyed);
    END LOOP;

    PERFORM set_config('pgqueue.claim_hints', v_hints::text, true);
    RETURN QUERY SELECT x.id, v_now FROM unnest(v_all) AS x(id);
END
$fn$;

-- Whoever could run the old claim_pick (the worker role of the roles script) can run the new
-- one, so that workers keep claiming before the roles script is run again.
DO $grants$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee::regrole AS grantee
        FROM pg_catalog.pg_proc AS p
        CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) AS a
        WHERE p.oid = '{schema}.claim_pick(text[], integer[], text[], integer, text[])'::regprocedure
          AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s',
                       '{schema}.claim_pick(text[], integer[], text[], integer, text[], boolean[])'::regprocedure,
                       r.grantee);
    END LOOP;
END
$grants$;

DROP FUNCTION {schema}.claim_pick(text[], integer[], text[], integer, text[]);

CREATE OR REPLACE VIEW {schema}.queue_controls AS
SELECT q.name AS queue,
       q.paused,
       q.concurrency,
       (SELECT count(*) FROM {schema}.jobs_live AS j WHERE j.state = 'running' AND j.queue = q.name) AS running,
       q.key_concurrency,
       q.key_fifo,
       q.rate_limit,
       extract(epoch FROM q.rate_period)::float8 AS rate_period_seconds,
       (SELECT coalesce(sum(r.n), 0) FROM {schema}.rate_starts AS r
        WHERE r.scope = 'q:' || q.name AND r.at > now() - q.rate_period)::bigint AS starts_in_window,
       q.key_rate_limit,
       extract(epoch FROM q.key_rate_period)::float8 AS key_rate_period_seconds,
       q.changed_at
FROM {schema}.queues AS q;
