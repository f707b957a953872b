-- Workflows: jobs that depend on other jobs (pgqueue/_db/workflows.py). Releasing and
-- cancelling dependents is part of whatever finishes a job (job_record_outcomes,
-- maintenance_tick, cancel_job(): settle_dependents() of migration 0011).

-- name: workflow_enqueue
-- A graph of jobs in one call (enqueue_workflow(), migration 0011): the new ids in node order.
SELECT {schema}.enqueue_workflow(%(nodes)s::jsonb)

-- name: job_parent_results
-- A child's parents with their state and result (JSON text), by parent id: what a
-- handler reads as ctx.parent_results. A parent removed by retention has no state.
SELECT d.parent_id, p.state::text, p.result::text
FROM {schema}.job_deps AS d
LEFT JOIN {schema}.jobs AS p ON p.id = d.parent_id
WHERE d.child_id = %(id)s
ORDER BY d.parent_id

-- name: job_relations
-- A job's workflow, its parents (with the edge's policy and the parent's final state once
-- settled) and its children: ('parent' | 'child', other job id, on_failure, parent_state).
SELECT 'parent', d.parent_id, d.on_failure, d.parent_state::text FROM {schema}.job_deps AS d WHERE d.child_id = %(id)s
UNION ALL
SELECT 'child', d.child_id, d.on_failure, d.parent_state::text FROM {schema}.job_deps AS d WHERE d.parent_id = %(id)s
ORDER BY 1 DESC, 2

-- name: job_workflow
-- A job's workflow id and its open parents (waiting_on; NULL: a job without dependencies).
SELECT workflow_id, waiting_on FROM {schema}.jobs WHERE id = %(id)s

-- name: workflow_progress
-- One workflow's jobs per status (the workflow_progress view); no row: no such workflow.
SELECT workflow_id, total, waiting, ready, running, completed, discarded, cancelled, created_at, finished_at
FROM {schema}.workflow_progress
WHERE workflow_id = %(workflow_id)s

-- name: workflow_jobs
-- One workflow's jobs in id order (the workflow_jobs view).
SELECT id, task, queue, status, parents, created_at, finished_at
FROM {schema}.workflow_jobs
WHERE workflow_id = %(workflow_id)s
ORDER BY id

-- name: workflow_cancel
-- Cancel every live job of a workflow (cancel_workflow(), migration 0011).
SELECT {schema}.cancel_workflow(%(workflow_id)s)

-- name: workflow_retry
-- Retry the discarded and cancelled jobs of a workflow, dependencies re-armed
-- (retry_workflow(), migration 0011).
SELECT {schema}.retry_workflow(%(workflow_id)s)

-- name: batch_create
-- A new open batch with its callbacks (batch_create(), migration 0012); its id.
SELECT {schema}.batch_create(%(callbacks)s::jsonb)

-- name: batch_close
-- Close a batch; its callbacks fire now if every member settled (batch_close()). False: no
-- such batch.
SELECT {schema}.batch_close(%(batch_id)s)

-- name: batch_cancel
-- Close a batch and cancel its members not finished yet (cancel_batch()).
SELECT {schema}.cancel_batch(%(batch_id)s)

-- name: batch_get
-- One batch's progress (the batch_progress view).
SELECT batch_id, total, completed, discarded, cancelled, pending, closed, created_at, closed_at, fired_at,
       callback_ids
FROM {schema}.batch_progress
WHERE batch_id = %(batch_id)s

-- name: job_callback_batch
-- The batch a callback job reports on, with its counts; no row for other jobs.
SELECT b.id, b.total, b.completed, b.discarded, b.cancelled
FROM {schema}.jobs AS j
JOIN {schema}.batches AS b ON b.id = j.callback_for
WHERE j.id = %(id)s
