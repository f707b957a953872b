-- Queries on the job table, loaded by pgqueue/_sql.py.
-- Format: a "-- name: NAME" line, description comments, then one statement.
-- {schema}, {channel} are substituted once per schema; %(param)s are bound values.

-- name: job_enqueue
-- One job through the SQL function: one round trip inside the caller's transaction. A
-- deadline given as expires_in counts from the job's run_at.
WITH job AS (
    SELECT coalesce(%(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s::float8)) AS run_at
)
SELECT {schema}.enqueue(
    %(task)s, %(args)s::jsonb, %(queue)s, %(priority)s, job.run_at, %(unique_key)s, %(max_attempts)s,
    %(concurrency_key)s,
    coalesce(%(expires_at)s::timestamptz, job.run_at + make_interval(secs => %(expires_in)s::float8)),
    make_interval(secs => %(unique_period)s::float8), %(unique_states)s::text[], %(unique_mode)s)
FROM job

-- name: job_insert
-- One job without a unique_key: a plain INSERT into the live partition plus its wake-up,
-- in one statement (no PL/pgSQL on the common path). Same rules as enqueue(): due now ->
-- 'available' and NOTIFY with the queue name; run_at in the future -> 'scheduled'.
-- scheduled_at = run_at: the time asked for, which retries leave alone. A deadline given
-- as expires_in counts from run_at. %(wake)s false skips the NOTIFY and %(echo)s adds an
-- echo request (pgqueue/_wake.py: a fast producer notifies once per window).
WITH job AS (
    SELECT coalesce(%(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s::float8)) AS run_at
), ins AS (
    INSERT INTO {schema}.jobs_live
        (task, args, queue, priority, run_at, scheduled_at, max_attempts, concurrency_key, expires_at, state)
    SELECT %(task)s, %(args)s::jsonb, %(queue)s, %(priority)s, job.run_at, job.run_at, %(max_attempts)s,
           %(concurrency_key)s,
           coalesce(%(expires_at)s::timestamptz, job.run_at + make_interval(secs => %(expires_in)s::float8)),
           CASE WHEN job.run_at <= now() THEN 'available' ELSE 'scheduled' END::{schema}.job_state
    FROM job
    RETURNING id, state, queue
)
SELECT id,
       CASE WHEN state = 'available' AND %(wake)s THEN pg_notify({channel}, queue) END,
       CASE WHEN state = 'available' AND %(echo)s::text IS NOT NULL THEN pg_notify({channel}, %(echo)s) END
FROM ins

-- name: job_copy
-- COPY target for enqueue_many: rows go straight into the live partition
-- (scheduled_at = run_at, as in job_insert).
COPY {schema}.jobs_live
    (task, args, queue, priority, run_at, scheduled_at, state, max_attempts, concurrency_key, expires_at)
FROM STDIN

-- name: db_now
-- The database clock (transaction start), used to turn delays into run_at for COPY.
SELECT now()

-- name: queue_notify
-- Wake workers of these queues (called once per enqueue_many, one NOTIFY per queue).
SELECT pg_notify({channel}, q) FROM unnest(%(queues)s::text[]) AS q

-- name: worker_plans
-- Sent before the worker's hot statements (claims, outcomes, heartbeats), in the same
-- transaction (a pipeline, or the caller's transaction): they run on their generic plans,
-- made without sequential scans. Two problems of PostgreSQL's defaults, measured:
-- * a claim was planned afresh every time (a generic plan cannot know the claim's LIMIT,
--   so it never looks cheaper than a custom one), and planning cost more server time than
--   a small claim itself;
-- * a statement prepared while the live table looked empty (an idle queue, analyzed
--   empty) got a generic plan that scans the table, and kept it after jobs poured in
--   until the next ANALYZE: every completion then read the whole table.
-- Their plans are the same index walks whatever the table holds; enable_seqscan off keeps
-- the generic plans on the claim and primary-key indexes (claim_picked's "= ANY" makes the
-- latter usable for a claim). Both settings are local to the transaction: nothing else on
-- the connection is affected.
SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true)

-- name: worker_session_plans
-- The settings of worker_plans for a whole session: set once on each connection that
-- only the worker's own hot statements use (claims, outcomes, heartbeats; never a
-- handler's or an operator's statement). Those statements then need neither
-- worker_plans nor, alone, a pipeline: a claim with no outcome riding along is one
-- plain statement, one round trip, as cheap for the client as a query can be.
SELECT set_config('plan_cache_mode', 'force_generic_plan', false), set_config('enable_seqscan', 'off', false)

-- fragment: claim_picked
-- The claim itself, shared by every claim below: each row of the CTE "picked" (id,
-- started_at) becomes running under a fresh lease from started_at, its attempt counted; a
-- NULL max_attempts becomes the task's own setting. Returns the columns of
-- pgqueue.models.Job. The "= ANY" repeats the join as an index condition: a generic plan
-- (which cannot know how many rows "picked" holds) then still finds them by primary key.
UPDATE {schema}.jobs_live AS j
SET state = 'running',
    attempt = j.attempt + 1,
    started_at = picked.started_at,
    lease_token = gen_random_uuid(),
    lease_expires_at = picked.started_at + make_interval(secs => %(lease)s::float8),
    worker_id = %(worker_id)s,
    max_attempts = coalesce(j.max_attempts, (
        SELECT d.max_attempts
        FROM unnest(%(tasks)s::text[], %(task_max_attempts)s::int[]) AS d(task, max_attempts)
        WHERE d.task = j.task))
FROM picked
WHERE j.id = picked.id AND j.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING j.id, j.queue, j.task, j.args, j.priority, j.attempt, j.max_attempts,
          j.lease_token, j.run_at, j.created_at, picked.started_at - j.run_at AS pickup_delay,
          coalesce(j.scheduled_at, j.run_at) AS scheduled_at, j.snoozes, j.expires_at, j.concurrency_key,
          j.waiting_on IS NOT NULL AS has_parents

-- name: job_claim_one_queue
-- Claim up to %(limit)s available jobs of one queue in the index's order (priority DESC,
-- run_at, id, i.e. ((-priority), run_at, id) ascending), taking a fresh lease on each,
-- starting after the cursor %(after)s (the key of the last job a previous claim took; a
-- cursor below every key scans from the head). A NULL max_attempts becomes the task's own
-- setting. scheduled_at NULL (a row inserted without it) reads as run_at. A job past its
-- deadline (expires_at) is skipped: no attempt starts after it (maintenance cancels it).
-- Flow control: nothing of a controlled queue (paused or limited) and no job of a limited
-- task is taken here (job_claim_limited does that, under the scopes' locks); each check is
-- one probe of a small table, evaluated once per claim.
WITH picked AS (
    SELECT id, now() AS started_at
    FROM {schema}.jobs_live
    WHERE state = 'available' AND queue = %(queue)s
      AND task = ANY(ARRAY(SELECT t FROM unnest(%(tasks)s::text[]) AS t
                           WHERE NOT EXISTS (SELECT FROM {schema}.task_limits AS l WHERE l.task = t)))
      AND NOT EXISTS (SELECT FROM {schema}.queues AS c WHERE c.name = %(queue)s AND c.controlled)
      AND (expires_at IS NULL OR expires_at > now())
      AND ((-priority::integer), run_at, id) > (%(after_priority)s::integer, %(after_run_at)s::timestamptz,
                                               %(after_id)s::bigint)
    ORDER BY (-priority::integer), run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
-- include: claim_picked

-- name: job_claim_many_queues
-- Same as job_claim_one_queue over several queues, each with its own cursor and its own
-- cap (%(queue_limits)s: this process's free slots for the queue): one ordered index scan
-- per queue, merged, so no queue starves and no sort over the backlog is needed.
WITH free_tasks AS MATERIALIZED (
    SELECT ARRAY(SELECT t FROM unnest(%(tasks)s::text[]) AS t
                 WHERE NOT EXISTS (SELECT FROM {schema}.task_limits AS l WHERE l.task = t)) AS tasks
), candidates AS (
    SELECT c.id, c.priority, c.run_at
    FROM unnest(%(queues)s::text[], %(queue_limits)s::integer[], %(after_priority)s::integer[],
                %(after_run_at)s::timestamptz[], %(after_id)s::bigint[])
         AS q(name, cap, after_priority, after_run_at, after_id)
    CROSS JOIN free_tasks AS f
    CROSS JOIN LATERAL (
        SELECT id, priority, run_at
        FROM {schema}.jobs_live
        WHERE state = 'available' AND queue = q.name AND task = ANY(f.tasks)
          AND (expires_at IS NULL OR expires_at > now())
          AND ((-priority::integer), run_at, id) > (q.after_priority, q.after_run_at, q.after_id)
        ORDER BY (-priority::integer), run_at, id
        LIMIT least(q.cap, %(limit)s)
        FOR UPDATE SKIP LOCKED
    ) AS c
    WHERE NOT EXISTS (SELECT FROM {schema}.queues AS s WHERE s.name = q.name AND s.controlled)
), picked AS (
    SELECT id, now() AS started_at FROM candidates ORDER BY priority DESC, run_at, id LIMIT %(limit)s
)
-- include: claim_picked

-- name: job_claim_lock
-- A limited claim, step 1: lock the controlled queues among %(queues)s and the limited
-- tasks among %(tasks)s (see claim_lock() in migration 0008).
SELECT {schema}.claim_lock(%(queues)s::text[], %(tasks)s::text[], %(lock_prefix)s)

-- name: job_claim_limited
-- A limited claim, step 2, in the same transaction after job_claim_lock: claim_pick()
-- picks what every control allows (a fresh snapshot, taken under the locks), the claim
-- takes them.
WITH picked AS MATERIALIZED (
    SELECT id, started_at
    FROM {schema}.claim_pick(%(queues)s::text[], %(queue_limits)s::integer[], %(tasks)s::text[],
                             %(limit)s, %(key_cursors)s::text[], %(unkeyed)s::boolean[])
)
-- include: claim_picked

-- name: job_claim_hints
-- A limited claim, step 3: what claim_pick learnt of each queue (a JSON array of objects:
-- queue, wait, blocked, key_cursor, unkeyed), left for this transaction.
SELECT current_setting('pgqueue.claim_hints', true)

-- name: flow_settings
-- Which of a worker's queues are controlled (paused or limited) and which of its tasks have
-- a concurrency limit: ('q', queue) and ('t', task) rows, and ('g', queue) for the queues
-- with a global concurrency limit or a rate (where a job claimed ahead into a worker's
-- buffer would keep a slot from others, or start later than the start it was counted as).
SELECT 'q', name FROM {schema}.queues WHERE name = ANY(%(queues)s::text[]) AND controlled
UNION ALL
SELECT 'g', name FROM {schema}.queues
WHERE name = ANY(%(queues)s::text[])
  AND (concurrency IS NOT NULL OR rate_limit IS NOT NULL OR key_rate_limit IS NOT NULL)
UNION ALL
SELECT 't', task FROM {schema}.task_limits WHERE task = ANY(%(tasks)s::text[])

-- name: queue_add_many
-- A worker records the queues it serves, so that operators can pause and limit them.
INSERT INTO {schema}.queues (name) SELECT unnest(%(queues)s::text[]) ON CONFLICT (name) DO NOTHING

-- name: job_record_outcomes
-- Persist a batch of attempt outcomes, fenced by lease token: rows whose lease was lost
-- (rescued, released, cancelled) are left alone and their ids are not returned.
-- retryable: stays live with a new run_at; available/scheduled (a snooze): the same, and
-- the attempt counted at claim is given back, counted in snoozes instead;
-- completed/discarded/cancelled: moves to the finished partitions. An error object, if
-- any, is appended to errors with the time.
-- scheduled_at keeps the time the job was first scheduled for (pinned from the old run_at
-- where it was never set).
-- Rows are found through the primary key and locked in id order, the same order every
-- multi-row writer here uses, so concurrent heartbeats and completions cannot deadlock.
-- The batch comes as one JSON array (one parameter that the client serialises in C,
-- rather than five arrays dumped element by element).
-- Results: an outcome with a "result" (the handler's return value as JSON text, absent
-- when it returned None) stores it in the finished row. The awaited flag is read from the
-- row as locked (its newest version), and if a job this statement finished was awaited,
-- one NOTIFY on the results channel goes out for the whole batch (none otherwise).
WITH outcome AS (
    SELECT *
    FROM jsonb_to_recordset(%(outcomes)s::jsonb)
         AS o(id bigint, token uuid, state {schema}.job_state, delay float8, error jsonb, result text)
), locked AS MATERIALIZED (
    SELECT j.id, o.state, o.delay, o.error, o.result, j.awaited, j.has_children
    FROM outcome AS o
    JOIN {schema}.jobs_live AS j ON j.id = o.id AND j.lease_token = o.token
    ORDER BY j.id
    FOR UPDATE OF j
), retried AS (
    UPDATE {schema}.jobs_live AS j
    SET state = l.state,
        run_at = now() + make_interval(secs => l.delay),
        scheduled_at = coalesce(j.scheduled_at, j.run_at),
        lease_token = NULL,
        lease_expires_at = NULL,
        attempt = CASE WHEN l.state = 'retryable' THEN j.attempt ELSE j.attempt - 1 END,
        snoozes = CASE WHEN l.state = 'retryable' THEN j.snoozes ELSE j.snoozes + 1 END,
        errors = CASE WHEN l.error IS NULL THEN j.errors
                      ELSE j.errors || jsonb_build_array(l.error || jsonb_build_object('at', now())) END
    FROM locked AS l
    WHERE j.id = l.id AND l.state IN ('retryable', 'available', 'scheduled')
    RETURNING j.id
), finished AS (
    DELETE FROM {schema}.jobs_live AS j
    USING locked AS l
    WHERE j.id = l.id AND l.state IN ('completed', 'discarded', 'cancelled')
    RETURNING j.id, j.queue, j.task, j.args, l.state AS new_state, j.priority, j.run_at,
              coalesce(j.scheduled_at, j.run_at) AS scheduled_at, j.attempt, j.max_attempts, j.unique_key, j.created_at, j.started_at, j.worker_id,
              CASE WHEN l.error IS NULL THEN j.errors
                   ELSE j.errors || jsonb_build_array(l.error || jsonb_build_object('at', now())) END AS errors,
              j.concurrency_key, j.expires_at, j.snoozes, j.dedupe_key, l.result::jsonb AS result, l.awaited,
              j.waiting_on, l.has_children, j.workflow_id
), moved AS (
    INSERT INTO {schema}.jobs
        (id, queue, task, args, state, priority, run_at, scheduled_at, attempt, max_attempts, unique_key,
         created_at, started_at, finished_at, worker_id, errors, concurrency_key, expires_at, snoozes, dedupe_key,
         result, waiting_on, has_children, workflow_id)
    SELECT id, queue, task, args, new_state, priority, run_at, scheduled_at, attempt, max_attempts, unique_key,
           created_at, started_at, now(), worker_id, errors, concurrency_key, expires_at, snoozes, dedupe_key,
           result, waiting_on, has_children, workflow_id
    FROM finished
    RETURNING id
), dependents AS (
    -- Workflows: the dependents of the jobs finished here are released or cancelled by this
    -- statement (settle_dependents(), migration 0011). Only jobs others depend on
    -- (has_children, read from the row as locked) get there: for a batch of plain jobs the
    -- HAVING is false and nothing is called. No row comes out ("IS NULL" of a count).
    SELECT NULL::bigint AS id
    FROM (SELECT {schema}.settle_dependents(array_agg(id ORDER BY id), array_agg(new_state ORDER BY id)) AS n
          FROM finished WHERE has_children HAVING count(*) > 0) AS s
    WHERE s.n IS NULL
), results_woken AS (
    -- At most one row: pg_notify() runs once, and "IS NULL" (never true of its void result)
    -- keeps that row out of the ids returned.
    SELECT NULL::bigint AS id
    FROM (SELECT FROM finished WHERE awaited LIMIT 1) AS w
    WHERE pg_notify({results_channel}, '') IS NULL
)
SELECT id FROM retried UNION ALL SELECT id FROM moved UNION ALL SELECT id FROM results_woken
UNION ALL SELECT id FROM dependents

-- name: job_extend_leases
-- Heartbeat: extend the leases this worker still holds; returns the ids still held, each
-- with whether an operator asked it to stop (cancel_job()).
WITH locked AS MATERIALIZED (
    SELECT j.id
    FROM {schema}.jobs_live AS j
    JOIN unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS o(id, token)
      ON o.id = j.id AND o.token = j.lease_token
    WHERE j.id = ANY(%(ids)s::bigint[])
    ORDER BY j.id
    FOR UPDATE OF j
)
UPDATE {schema}.jobs_live AS j
SET lease_expires_at = now() + make_interval(secs => %(lease)s::float8)
FROM locked AS l
WHERE j.id = l.id
RETURNING j.id, j.cancel_requested_at IS NOT NULL

-- name: job_release
-- Graceful shutdown: hand unfinished jobs back as available, not counting the attempt.
WITH locked AS MATERIALIZED (
    SELECT j.id
    FROM {schema}.jobs_live AS j
    JOIN unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS o(id, token)
      ON o.id = j.id AND o.token = j.lease_token
    WHERE j.id = ANY(%(ids)s::bigint[])
    ORDER BY j.id
    FOR UPDATE OF j
), released AS (
    UPDATE {schema}.jobs_live AS j
    SET state = 'available',
        attempt = greatest(j.attempt - 1, 0),
        lease_token = NULL,
        lease_expires_at = NULL,
        worker_id = NULL
    FROM locked AS l
    WHERE j.id = l.id
    RETURNING j.id, j.queue
), notified AS (
    SELECT pg_notify({channel}, q) FROM (SELECT DISTINCT queue FROM released) AS r(q)
)
SELECT (SELECT count(*) FROM released), (SELECT count(*) FROM notified)

-- name: queue_listen
-- The listener's subscription to the schema's wake-up channel.
LISTEN {channel_ident}

-- name: connection_ping
-- The listener's health check on a quiet connection.
SELECT 1
