-- pgqueue schema, version 11: dependencies between jobs (workflows: chains, groups, DAGs).
--
--   jobs.waiting_on    NULL for a job enqueued without dependencies (every plain job);
--                      else how many of its parents have not settled yet. While it is
--                      above 0 the job waits: state 'scheduled' with run_at parked at
--                      9998-01-01 (no scheduler ever finds it due, no claim sees it, no
--                      lag counts it) and its own run_at kept in scheduled_at. The view
--                      waiting_jobs lists them.
--   jobs.has_children  true on a job that others depend on; NULL otherwise. Whatever
--                      finishes a job reads it from the row it locked (like awaited, 0009)
--                      and only then settles the job's dependents: plain jobs pay nothing.
--   jobs.workflow_id   the workflow a job belongs to (the id of its first job), NULL for
--                      plain jobs: views, `pgqueue jobs show`, cancel/retry of a workflow.
--   job_deps           one row per edge (child, parent): the policy for a parent that ends
--                      discarded or cancelled ('cancel' the child, or 'run' it anyway) and
--                      the parent's final state once it settled (NULL before).
--   settle_dependents() the one place dependents are released or cancelled (cascading),
--                      called by every statement that finishes a job with has_children.
--   enqueue_workflow()  a whole graph in one call, inside the caller's transaction.
--
-- Why a flag on the parent's row, set with an UPDATE at enqueue: the enqueue locks each
-- live parent, so either it locks first and the finisher (which locks after it commits)
-- reads has_children from the newest version and, in a later statement with a fresh
-- snapshot, sees the new edges; or the finisher locks first, the enqueue's UPDATE finds
-- the row gone and its next statement finds the parent finished and settles at once.
-- No polling resolver, no lost wake-up.
--
-- Columns are added to the partitioned parent without a default: no row is rewritten.

ALTER TABLE {schema}.jobs
    ADD COLUMN waiting_on integer,
    ADD COLUMN has_children boolean,
    ADD COLUMN workflow_id bigint;

COMMENT ON COLUMN {schema}.jobs.waiting_on IS
    'NULL: the job has no dependencies. Else the number of its parents not settled yet; above 0 the job waits (state scheduled, run_at parked at 9998-01-01, its own run_at in scheduled_at).';
COMMENT ON COLUMN {schema}.jobs.has_children IS
    'true when other jobs depend on this one: finishing it settles them (job_deps).';
COMMENT ON COLUMN {schema}.jobs.workflow_id IS
    'The workflow (id of its first job) this job belongs to; NULL for plain jobs.';

ALTER TABLE {schema}.jobs_live
    ADD CONSTRAINT jobs_waiting_on_range CHECK (waiting_on >= 0);

CREATE TABLE {schema}.job_deps (
    child_id     bigint NOT NULL,
    parent_id    bigint NOT NULL,
    on_failure   text   NOT NULL DEFAULT 'cancel',
    parent_state {schema}.job_state,
    PRIMARY KEY (child_id, parent_id),
    CONSTRAINT job_deps_on_failure CHECK (on_failure IN ('cancel', 'run')),
    CONSTRAINT job_deps_not_self CHECK (child_id <> parent_id),
    CONSTRAINT job_deps_settled_final CHECK (parent_state IS NULL OR parent_state IN ('completed', 'discarded', 'cancelled'))
) WITH (fillfactor = 80);
CREATE INDEX job_deps_parent ON {schema}.job_deps (parent_id);

COMMENT ON TABLE {schema}.job_deps IS
    'Dependencies: child_id waits for parent_id. on_failure: cancel the child (cascading) or run it anyway when the parent ends discarded or cancelled; parent_state: the parent''s final state once settled.';

-- Workflow lookups; partial, so plain jobs never enter them.
CREATE INDEX jobs_live_workflow ON {schema}.jobs_live (workflow_id) WHERE workflow_id IS NOT NULL;
CREATE INDEX jobs_completed_workflow ON {schema}.jobs_completed (workflow_id) WHERE workflow_id IS NOT NULL;
CREATE INDEX jobs_discarded_workflow ON {schema}.jobs_discarded (workflow_id) WHERE workflow_id IS NOT NULL;
CREATE INDEX jobs_cancelled_workflow ON {schema}.jobs_cancelled (workflow_id) WHERE workflow_id IS NOT NULL;

-- -- settle_dependents() ----------------------------------------------------------------------
-- Parents p_parents just reached their final states p_states (same order). Their open
-- edges are settled; each child still waiting is locked (id order, like every multi-row
-- writer of the live partition) and either
--   * cancelled, when a parent ended discarded or cancelled under the policy 'cancel': it
--     moves to the cancelled partition with a pgqueue.DependencyFailed error, and its own
--     dependents are settled in turn (the loop: a cascade, one level per round); or
--   * counted down; at 0 it is released: available (its queue woken) or, if its own
--     run_at is still ahead, scheduled for it.
-- An edge whose child is not waiting (already cancelled, or retried by hand) is settled
-- and nothing else happens. Returns how many children were released or cancelled.
CREATE FUNCTION {schema}.settle_dependents(p_parents bigint[], p_states {schema}.job_state[])
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_done integer := 0;
    v_children bigint[];
    v_counts integer[];
    v_bad bigint[];
    v_bad_state text[];
    v_n integer;
BEGIN
    WHILE cardinality(p_parents) > 0 LOOP
        WITH settled AS (
            UPDATE {schema}.job_deps AS d
            SET parent_state = x.state
            FROM unnest(p_parents, p_states) AS x(id, state)
            WHERE d.parent_id = x.id AND d.parent_state IS NULL
            RETURNING d.child_id, d.parent_id, x.state,
                      (x.state = 'completed' OR d.on_failure = 'run') AS ok
        )
        SELECT coalesce(array_agg(s.child_id ORDER BY s.child_id), '{{}}'),
               coalesce(array_agg(s.n ORDER BY s.child_id), '{{}}'),
               coalesce(array_agg(s.bad ORDER BY s.child_id), '{{}}'),
               coalesce(array_agg(s.bad_state ORDER BY s.child_id), '{{}}')
        INTO v_children, v_counts, v_bad, v_bad_state
        FROM (
            SELECT child_id, count(*)::integer AS n,
                   min(parent_id) FILTER (WHERE NOT ok) AS bad,
                   min(state::text) FILTER (WHERE NOT ok) AS bad_state
            FROM settled GROUP BY child_id
        ) AS s;
        EXIT WHEN cardinality(v_children) = 0;

        WITH c AS (
            SELECT * FROM unnest(v_children, v_counts, v_bad, v_bad_state) AS c(id, n, bad, bad_state)
        ), locked AS MATERIALIZED (
            SELECT j.id, c.n, c.bad, c.bad_state
            FROM {schema}.jobs_live AS j
            JOIN c ON c.id = j.id
            WHERE j.waiting_on > 0
            ORDER BY j.id
            FOR UPDATE OF j
        ), counted AS (
            UPDATE {schema}.jobs_live AS j
            SET waiting_on = greatest(j.waiting_on - l.n, 0),
                state = CASE WHEN j.waiting_on - l.n > 0 THEN j.state
                             WHEN j.scheduled_at <= now() THEN 'available'
                             ELSE 'scheduled' END::{schema}.job_state,
                run_at = CASE WHEN j.waiting_on - l.n > 0 THEN j.run_at
                              ELSE greatest(j.scheduled_at, now()) END
            FROM locked AS l
            WHERE j.id = l.id AND l.bad IS NULL
            RETURNING j.id, j.state, j.queue, j.run_at
        ), gone AS (
            DELETE FROM {schema}.jobs_live AS j
            USING locked AS l
            WHERE j.id = l.id AND l.bad IS NOT NULL
            RETURNING j.*, l.bad, l.bad_state
        ), moved AS (
            INSERT INTO {schema}.jobs
                (id, queue, task, args, state, priority, run_at, scheduled_at, attempt, max_attempts,
                 unique_key, created_at, started_at, finished_at, worker_id, errors, concurrency_key,
                 expires_at, snoozes, dedupe_key, waiting_on, has_children, workflow_id)
            SELECT id, queue, task, args, 'cancelled', priority, scheduled_at, scheduled_at, attempt,
                   max_attempts, unique_key, created_at, started_at, now(), worker_id,
                   errors || jsonb_build_array(jsonb_build_object(
                       'attempt', attempt, 'type', 'pgqueue.DependencyFailed',
                       'message', 'job ' || bad || ' it depends on ended ' || bad_state, 'at', now())),
                   concurrency_key, expires_at, snoozes, dedupe_key, waiting_on, has_children, workflow_id
            FROM gone
            RETURNING id
        ), woken AS (
            SELECT pg_notify({channel}, q)
            FROM (SELECT DISTINCT queue FROM counted WHERE state = 'available') AS r(q)
        ), results_woken AS (
            SELECT 1 FROM (SELECT FROM gone WHERE awaited LIMIT 1) AS w
            WHERE pg_notify({results_channel}, '') IS NOT NULL
        )
        SELECT (SELECT count(*) FROM counted WHERE state <> 'scheduled' OR run_at < '9998-01-01')
                 + (SELECT count(*) FROM moved) + 0 * (SELECT count(*) FROM woken)
                 + 0 * (SELECT count(*) FROM results_woken),
               coalesce((SELECT array_agg(id ORDER BY id) FROM gone WHERE has_children), '{{}}')
        INTO v_n, p_parents;
        v_done := v_done + v_n;
        p_states := array_fill('cancelled'::{schema}.job_state, ARRAY[cardinality(p_parents)]);
    END LOOP;
    RETURN v_done;
END
$fn$;

COMMENT ON FUNCTION {schema}.settle_dependents(bigint[], {schema}.job_state[]) IS
    'Settle the dependents of jobs that just reached these final states: release them (at 0 open parents) or cancel them (a failed parent under the policy cancel), cascading. Called by everything that finishes a job with has_children.';

-- -- enqueue_workflow() ---------------------------------------------------------------------
-- A graph of jobs in one call, inside the caller's transaction (rolled back: nothing of it
-- exists). nodes is a JSON array in topological order; each element is an object with
-- task, args (object), queue, priority, run_at (or delay seconds), max_attempts,
-- concurrency_key, expires_at (or expires_in seconds from run_at), has_children, and deps:
-- an array of [kind, ref, on_failure] where kind 'n' names an earlier node (0-based) and
-- 'j' an existing job id; on_failure is 'cancel' or 'run'. Returns the new ids in node
-- order. A dependency on an earlier node only, or on a job that exists already, makes a
-- cycle impossible: a reference to a node that is not earlier is refused.
-- Existing parents: live ones are flagged (has_children, a row lock; see the header);
-- finished ones settle the new edges at once (completed: satisfied; discarded or
-- cancelled: the edge's policy). An id found nowhere is refused: nothing is created.
CREATE FUNCTION {schema}.enqueue_workflow(nodes jsonb) RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_ext bigint[];
    v_live bigint[];
    v_done bigint[];
    v_done_states {schema}.job_state[];
    v_missing bigint;
    v_wf bigint;
    v_ids bigint[] := '{{}}';
    v_queues text[] := '{{}}';
    v_node jsonb;
    v_id bigint;
    v_run_at timestamptz;
    v_deps integer;
    v_bad text;
BEGIN
    IF jsonb_typeof(nodes) IS DISTINCT FROM 'array' OR jsonb_array_length(nodes) = 0 THEN
        RAISE EXCEPTION 'pgqueue.enqueue_workflow: nodes must be a non-empty JSON array'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT coalesce(array_agg(DISTINCT (d.dep ->> 1)::bigint), '{{}}') INTO v_ext
    FROM jsonb_array_elements(nodes) AS n(node)
    CROSS JOIN LATERAL jsonb_array_elements(coalesce(n.node -> 'deps', '[]')) AS d(dep)
    WHERE d.dep ->> 0 = 'j';

    -- Live parents: flagged under a row lock, in id order.
    WITH locked AS MATERIALIZED (
        SELECT j.id FROM {schema}.jobs_live AS j WHERE j.id = ANY(v_ext) ORDER BY j.id FOR UPDATE
    ), flagged AS (
        UPDATE {schema}.jobs_live AS j
        SET has_children = true, workflow_id = coalesce(j.workflow_id, j.id)
        FROM locked AS l
        WHERE j.id = l.id
        RETURNING j.id, j.workflow_id
    )
    SELECT coalesce(array_agg(id), '{{}}'), min(workflow_id) INTO v_live, v_wf FROM flagged;

    -- The others must have finished (a new statement: a parent finished meanwhile is seen).
    SELECT coalesce(array_agg(f.id ORDER BY f.id), '{{}}'), coalesce(array_agg(f.state ORDER BY f.id), '{{}}'),
           least(v_wf, min(coalesce(f.workflow_id, f.id)))
    INTO v_done, v_done_states, v_wf
    FROM {schema}.jobs AS f
    WHERE f.id = ANY(v_ext) AND f.id <> ALL(v_live) AND f.state IN ('completed', 'discarded', 'cancelled');
    SELECT x INTO v_missing FROM unnest(v_ext) AS x WHERE x <> ALL(v_live) AND x <> ALL(v_done) ORDER BY x LIMIT 1;
    IF v_missing IS NOT NULL THEN
        RAISE EXCEPTION 'pgqueue.enqueue_workflow: depends_on names job %, which does not exist', v_missing
            USING ERRCODE = 'foreign_key_violation',
                  HINT = 'it was never committed, or retention removed it';
    END IF;

    FOR i IN 0 .. jsonb_array_length(nodes) - 1 LOOP
        v_node := nodes -> i;
        SELECT d.dep::text INTO v_bad
        FROM jsonb_array_elements(coalesce(v_node -> 'deps', '[]')) AS d(dep)
        WHERE d.dep ->> 0 NOT IN ('n', 'j') OR coalesce(d.dep ->> 2, 'cancel') NOT IN ('cancel', 'run')
           OR (d.dep ->> 0 = 'n' AND NOT (d.dep ->> 1)::integer BETWEEN 0 AND i - 1)
        LIMIT 1;
        IF v_bad IS NOT NULL THEN
            RAISE EXCEPTION 'pgqueue.enqueue_workflow: node % has a bad dependency %: a node may only depend on earlier nodes (no cycles) or on existing jobs, with on_failure cancel or run', i, v_bad
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        SELECT count(DISTINCT (d.dep ->> 0, d.dep ->> 1)) INTO v_deps
        FROM jsonb_array_elements(coalesce(v_node -> 'deps', '[]')) AS d(dep);
        v_id := nextval({id_seq});
        v_wf := coalesce(v_wf, v_id);
        v_run_at := coalesce((v_node ->> 'run_at')::timestamptz,
                             now() + make_interval(secs => coalesce((v_node ->> 'delay')::float8, 0)));
        INSERT INTO {schema}.jobs_live
            (id, task, args, queue, priority, run_at, scheduled_at, max_attempts, concurrency_key,
             expires_at, state, waiting_on, has_children, workflow_id)
        VALUES (v_id, v_node ->> 'task', coalesce(v_node -> 'args', '{{}}'), v_node ->> 'queue',
                coalesce((v_node ->> 'priority')::integer, 0),
                CASE WHEN v_deps > 0 THEN '9998-01-01 00:00:00+00'::timestamptz ELSE v_run_at END,
                v_run_at, (v_node ->> 'max_attempts')::integer, v_node ->> 'concurrency_key',
                coalesce((v_node ->> 'expires_at')::timestamptz,
                         v_run_at + make_interval(secs => (v_node ->> 'expires_in')::float8)),
                CASE WHEN v_deps > 0 OR v_run_at > now() THEN 'scheduled' ELSE 'available' END::{schema}.job_state,
                nullif(v_deps, 0), CASE WHEN (v_node ->> 'has_children')::boolean THEN true END, v_wf);
        v_ids := v_ids || v_id;
        INSERT INTO {schema}.job_deps (child_id, parent_id, on_failure)
        SELECT v_id, CASE WHEN d.dep ->> 0 = 'n' THEN v_ids[(d.dep ->> 1)::integer + 1] ELSE (d.dep ->> 1)::bigint END,
               coalesce(d.dep ->> 2, 'cancel')
        FROM jsonb_array_elements(coalesce(v_node -> 'deps', '[]')) AS d(dep)
        ON CONFLICT DO NOTHING;
        IF v_deps = 0 AND v_run_at <= now() THEN
            v_queues := v_queues || (v_node ->> 'queue');
        END IF;
    END LOOP;

    IF cardinality(v_done) > 0 THEN
        PERFORM {schema}.settle_dependents(v_done, v_done_states);
    END IF;
    PERFORM pg_notify({channel}, q) FROM (SELECT DISTINCT unnest(v_queues)) AS x(q);
    RETURN v_ids;
END
$fn$;

COMMENT ON FUNCTION {schema}.enqueue_workflow(jsonb) IS
    'Enqueue a graph of jobs (JSON array of nodes in topological order, each with its deps on earlier nodes or existing jobs) atomically; returns the new ids in node order.';

-- -- cancel_job(): as in 0009, and it settles the job's dependents ---------------------------

CREATE OR REPLACE FUNCTION {schema}.cancel_job(job_id bigint) RETURNS {schema}.job_state
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_state {schema}.job_state;
    v_awaited boolean;
    v_children boolean;
BEGIN
    FOR i IN 1..5 LOOP
        WITH gone AS (
            DELETE FROM {schema}.jobs_live AS j
            WHERE j.id = cancel_job.job_id AND j.state IN ('available', 'scheduled', 'retryable')
            RETURNING j.*
        ), moved AS (
            INSERT INTO {schema}.jobs
                (id, queue, task, args, state, priority, run_at, scheduled_at, attempt, max_attempts,
                 unique_key, created_at, started_at, finished_at, worker_id, errors, cancel_requested_at,
                 concurrency_key, expires_at, snoozes, dedupe_key, waiting_on, has_children, workflow_id)
            SELECT id, queue, task, args, 'cancelled', priority,
                   CASE WHEN waiting_on > 0 THEN scheduled_at ELSE run_at END, coalesce(scheduled_at, run_at),
                   attempt, max_attempts, unique_key, created_at, started_at, now(), worker_id, errors, now(),
                   concurrency_key, expires_at, snoozes, dedupe_key, waiting_on, has_children, workflow_id
            FROM gone
            RETURNING state
        )
        SELECT (SELECT m.state FROM moved AS m), (SELECT g.awaited FROM gone AS g), (SELECT g.has_children FROM gone AS g)
        INTO v_state, v_awaited, v_children;
        IF v_state IS NOT NULL THEN
            IF v_awaited THEN
                PERFORM pg_notify({results_channel}, '');
            END IF;
            IF v_children THEN
                PERFORM {schema}.settle_dependents(ARRAY[cancel_job.job_id], ARRAY['cancelled'::{schema}.job_state]);
            END IF;
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

-- -- retry_job(): as in 0007, carrying the workflow columns ----------------------------------
-- A retried job runs at once, even if a parent it depends on failed (the operator's call);
-- retry_workflow() re-arms the dependencies instead.

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
         concurrency_key, expires_at, snoozes, dedupe_key, waiting_on, has_children, workflow_id)
    SELECT id, queue, task, args, 'available', priority, now(), coalesce(scheduled_at, run_at), attempt,
           CASE WHEN max_attempts IS NULL THEN NULL ELSE greatest(max_attempts, attempt + 1) END,
           unique_key, created_at, started_at, NULL, worker_id, errors, NULL,
           concurrency_key, CASE WHEN expires_at > now() THEN expires_at END, snoozes, dedupe_key,
           CASE WHEN waiting_on IS NOT NULL THEN 0 END, has_children, workflow_id
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

-- -- whole workflows -------------------------------------------------------------------------

-- cancel_workflow: cancel_job() on every live job of the workflow, in id order (a
-- parent's cancellation cascades to dependents under the policy cancel on its own).
-- Returns how many jobs were cancelled or asked to stop (running ones).
CREATE FUNCTION {schema}.cancel_workflow(p_workflow bigint) RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    r record;
    v_n integer := 0;
    v_state {schema}.job_state;
BEGIN
    FOR r IN SELECT j.id FROM {schema}.jobs_live AS j WHERE j.workflow_id = p_workflow ORDER BY j.id LOOP
        v_state := {schema}.cancel_job(r.id);
        IF v_state IN ('cancelled', 'running') THEN
            v_n := v_n + 1;
        END IF;
    END LOOP;
    RETURN v_n;
END
$fn$;

-- retry_workflow: retry every discarded or cancelled job of the workflow, then re-arm the
-- dependencies of the retried jobs: an edge whose parent is live again is open again, and
-- a retried job with open edges waits for them. Completed jobs are left alone. Returns
-- how many jobs were retried.
CREATE FUNCTION {schema}.retry_workflow(p_workflow bigint) RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    r record;
    v_ids bigint[] := '{{}}';
BEGIN
    FOR r IN
        SELECT j.id FROM {schema}.jobs AS j
        WHERE j.workflow_id = p_workflow AND j.state IN ('discarded', 'cancelled')
        ORDER BY j.id
    LOOP
        IF {schema}.retry_job(r.id) THEN
            v_ids := v_ids || r.id;
        END IF;
    END LOOP;
    UPDATE {schema}.job_deps AS d
    SET parent_state = NULL
    WHERE d.child_id = ANY(v_ids) AND d.parent_state IS NOT NULL
      AND EXISTS (SELECT FROM {schema}.jobs_live AS p WHERE p.id = d.parent_id);
    UPDATE {schema}.jobs_live AS j
    SET waiting_on = c.n, state = 'scheduled', run_at = '9998-01-01 00:00:00+00'
    FROM (SELECT d.child_id, count(*)::integer AS n FROM {schema}.job_deps AS d
          WHERE d.child_id = ANY(v_ids) AND d.parent_state IS NULL GROUP BY d.child_id) AS c
    WHERE j.id = c.child_id;
    RETURN cardinality(v_ids);
END
$fn$;

-- -- views -----------------------------------------------------------------------------------

CREATE VIEW {schema}.waiting_jobs AS
SELECT j.id, j.queue, j.task, j.workflow_id, j.waiting_on,
       ARRAY(SELECT d.parent_id FROM {schema}.job_deps AS d
             WHERE d.child_id = j.id AND d.parent_state IS NULL ORDER BY d.parent_id) AS waiting_for,
       j.scheduled_at AS run_at, j.created_at
FROM {schema}.jobs_live AS j
WHERE j.waiting_on > 0;
COMMENT ON VIEW {schema}.waiting_jobs IS
    'Jobs waiting for parents (state scheduled, not due, not counted as lag): how many and which parents are still open.';

CREATE VIEW {schema}.workflow_jobs AS
SELECT j.workflow_id, j.id, j.task, j.queue,
       CASE WHEN j.waiting_on > 0 AND j.state = 'scheduled' THEN 'waiting' ELSE j.state::text END AS status,
       ARRAY(SELECT d.parent_id FROM {schema}.job_deps AS d WHERE d.child_id = j.id ORDER BY d.parent_id) AS parents,
       j.created_at, j.finished_at
FROM {schema}.jobs AS j
WHERE j.workflow_id IS NOT NULL;
COMMENT ON VIEW {schema}.workflow_jobs IS
    'Every job of every workflow with its status (waiting: parents still open) and parents. Filter by workflow_id.';

CREATE VIEW {schema}.workflow_progress AS
SELECT j.workflow_id,
       count(*) AS total,
       count(*) FILTER (WHERE j.waiting_on > 0 AND j.state = 'scheduled') AS waiting,
       count(*) FILTER (WHERE j.state IN ('available', 'retryable')
                          OR (j.state = 'scheduled' AND NOT coalesce(j.waiting_on > 0, false))) AS ready,
       count(*) FILTER (WHERE j.state = 'running') AS running,
       count(*) FILTER (WHERE j.state = 'completed') AS completed,
       count(*) FILTER (WHERE j.state = 'discarded') AS discarded,
       count(*) FILTER (WHERE j.state = 'cancelled') AS cancelled,
       min(j.created_at) AS created_at,
       CASE WHEN bool_and(j.state IN ('completed', 'discarded', 'cancelled')) THEN max(j.finished_at) END AS finished_at
FROM {schema}.jobs AS j
WHERE j.workflow_id IS NOT NULL
GROUP BY j.workflow_id;
COMMENT ON VIEW {schema}.workflow_progress IS
    'One row per workflow: jobs per status; finished_at once every job is final. Filter by workflow_id.';
