-- pgqueue schema, version 13: the per-key claim in one statement.
--
-- With per-key concurrency over many keys, claim_pick() visited the keys one at a time: two
-- statements per key (find the next key, lock its jobs), a hundred keys for a claim of a
-- hundred jobs. Where a queue has per-key concurrency and nothing else per key (no key rate,
-- no strict FIFO), the walk is now one statement: a recursive skip-scan over the keyed index
-- yields the keys in turn (after the caller's cursor, then from the start up to it), and a
-- lateral subquery locks each key's oldest jobs up to what its limit leaves, the whole
-- stopping at the claim's limit. What may start is unchanged: the running count per key is
-- read once, in the same snapshot, under the queue's lock, as before. Key rates and FIFO
-- keys keep the key-by-key loop.

CREATE OR REPLACE FUNCTION {schema}.claim_pick(
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
            IF q.key_rate_limit IS NULL AND NOT q.key_fifo THEN
                -- Per-key concurrency only: one statement walks the keys (after the cursor,
                -- then from the start up to it) and takes each key's oldest jobs up to what
                -- its limit leaves. The LIMIT stops the walk as soon as enough are picked.
                WITH RECURSIVE after_start(key, n) AS (
                    SELECT (SELECT j.concurrency_key FROM {schema}.jobs_live AS j
                            WHERE j.queue = v_q AND j.state = 'available' AND j.concurrency_key > v_start_key
                            ORDER BY j.queue, j.state, j.concurrency_key LIMIT 1), 1
                    UNION ALL
                    SELECT (SELECT j.concurrency_key FROM {schema}.jobs_live AS j
                            WHERE j.queue = v_q AND j.state = 'available' AND j.concurrency_key > a.key
                            ORDER BY j.queue, j.state, j.concurrency_key LIMIT 1), a.n + 1
                    FROM after_start AS a
                    WHERE a.key IS NOT NULL AND a.n < 1000
                ), up_to_start(key, n) AS (
                    SELECT (SELECT j.concurrency_key FROM {schema}.jobs_live AS j
                            WHERE j.queue = v_q AND j.state = 'available' AND j.concurrency_key IS NOT NULL
                            ORDER BY j.queue, j.state, j.concurrency_key LIMIT 1), 1001
                    WHERE v_start_key <> ''
                    UNION ALL
                    SELECT (SELECT j.concurrency_key FROM {schema}.jobs_live AS j
                            WHERE j.queue = v_q AND j.state = 'available' AND j.concurrency_key > u.key
                            ORDER BY j.queue, j.state, j.concurrency_key LIMIT 1), u.n + 1
                    FROM up_to_start AS u
                    WHERE u.key IS NOT NULL AND u.key < v_start_key AND u.n < 2000
                ), walk AS (
                    SELECT a.key, a.n FROM after_start AS a WHERE a.key IS NOT NULL
                    UNION ALL
                    SELECT u.key, u.n FROM up_to_start AS u WHERE u.key IS NOT NULL AND u.key <= v_start_key
                )
                SELECT coalesce(array_agg(p.id ORDER BY p.n, p.id), '{{}}'),
                       coalesce(array_agg(p.task ORDER BY p.n, p.id), '{{}}'),
                       (array_agg(p.key ORDER BY p.n DESC))[1]
                INTO v_picked, v_picked_tasks, v_key
                FROM (
                    SELECT w.key, w.n, x.id, x.task
                    FROM (SELECT * FROM walk LIMIT 1000) AS w
                    CROSS JOIN LATERAL (
                        SELECT j.id, j.task
                        FROM {schema}.jobs_live AS j
                        WHERE j.queue = v_q AND j.state = 'available' AND j.concurrency_key = w.key
                          AND j.task = ANY(v_tasks) AND (j.expires_at IS NULL OR j.expires_at > v_now)
                        ORDER BY j.id
                        LIMIT greatest(q.key_concurrency - coalesce((v_running ->> w.key)::integer, 0), 0)
                        FOR UPDATE SKIP LOCKED
                    ) AS x
                    LIMIT v_allow
                ) AS p;
                -- The next claim starts after the last key that gave a job (none: where this began).
                v_cursor := coalesce(v_key, nullif(v_start_key, ''));
                v_allow := v_allow - cardinality(v_picked);
            ELSE
                -- Key rates or strict FIFO: key by key, each decided by its own rows.
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
            END IF;
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
