-- Flow control from the operator's side: pausing, limits, and what they look like now
-- (pgqueue.ops.queues, `pgqueue queues`, `pgqueue tasks`). Run by pgqueue._db.flow only.
-- The functions called here (migration 0008) validate their input, refuse unknown queues
-- and wake every worker.

-- name: queue_add
SELECT {schema}.add_queue(%(queue)s)

-- name: queue_pause
SELECT {schema}.pause_queue(%(queue)s)

-- name: queue_resume
SELECT {schema}.resume_queue(%(queue)s)

-- name: queue_set_limit
SELECT {schema}.set_queue_limit(%(queue)s, %(concurrency)s)

-- name: queue_set_rate
SELECT {schema}.set_queue_rate(%(queue)s, %(limit)s, make_interval(secs => %(period)s::float8))

-- name: queue_set_key_limit
SELECT {schema}.set_key_limit(%(queue)s, %(concurrency)s, %(fifo)s)

-- name: queue_set_key_rate
SELECT {schema}.set_key_rate(%(queue)s, %(limit)s, make_interval(secs => %(period)s::float8))

-- name: task_set_limit
SELECT {schema}.set_task_limit(%(task)s, %(concurrency)s)

-- name: queue_controls
-- Every known queue with its pause, limits, running jobs and starts in the rate window.
SELECT * FROM {schema}.queue_controls
WHERE %(queue)s::text IS NULL OR queue = %(queue)s
ORDER BY queue

-- name: task_controls
-- Every task limit with the running jobs it counts.
SELECT * FROM {schema}.task_controls ORDER BY task
