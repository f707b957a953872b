-- Observability queries: the worker registry, retention and metrics (loaded by _sql.py).
-- Views and operator functions live in sql/migrations/0003_observability.sql.

-- name: registry_upsert
-- Register or heartbeat in one statement: the row is created at start and refreshed at
-- every heartbeat (re-created if maintenance removed it while the worker was stalled).
-- expires_at = now() + 3 heartbeat intervals is what workers.alive compares with.
INSERT INTO {schema}.worker_registry AS w
    (worker_id, host, pid, queues, concurrency, in_flight, started_at, last_heartbeat, expires_at,
     listener_connected, version)
VALUES (%(worker_id)s, %(host)s, %(pid)s, %(queues)s::text[], %(concurrency)s, %(in_flight)s, now(), now(),
        now() + make_interval(secs => %(ttl)s::float8), %(listener_connected)s, %(version)s)
ON CONFLICT (worker_id) DO UPDATE
SET in_flight = excluded.in_flight,
    last_heartbeat = excluded.last_heartbeat,
    expires_at = excluded.expires_at,
    listener_connected = excluded.listener_connected

-- name: registry_delete
-- Graceful stop: the worker removes its own row.
DELETE FROM {schema}.worker_registry WHERE worker_id = %(worker_id)s

-- name: registry_cleanup
-- Maintenance: drop registrations that expired more than %(grace)s seconds ago (workers
-- killed without a graceful stop). Returns how many.
WITH gone AS (
    DELETE FROM {schema}.worker_registry
    WHERE expires_at < now() - make_interval(secs => %(grace)s::float8)
    RETURNING 1
)
SELECT count(*) FROM gone

-- name: settings_put
-- Record settings the maintenance leader applied (name -> jsonb value), for `pgqueue status`.
INSERT INTO {schema}.settings AS s (name, value, updated_at, updated_by)
SELECT n, v, now(), %(by)s
FROM unnest(%(names)s::text[], %(values)s::jsonb[]) AS t(n, v)
ON CONFLICT (name) DO UPDATE
SET value = excluded.value, updated_at = excluded.updated_at, updated_by = excluded.updated_by
WHERE s.value IS DISTINCT FROM excluded.value

-- name: metrics_queue_stats
-- Depth and lag of the queues a worker serves, whether each is paused and its global
-- concurrency limit (NULL: none), for its Prometheus gauges.
SELECT q.queue, coalesce(s.available, 0), coalesce(s.scheduled, 0), coalesce(s.running, 0),
       coalesce(s.retryable, 0), coalesce(s.lag_seconds, 0), coalesce(c.paused, false)::integer, c.concurrency
FROM unnest(%(queues)s::text[]) AS q(queue)
LEFT JOIN {schema}.queue_stats AS s ON s.queue = q.queue
LEFT JOIN {schema}.queues AS c ON c.name = q.queue

-- name: brin_recent_indexes
-- BRIN indexes of the finished-job partitions of yesterday and today (UTC): the ones the
-- views' time windows read. Returned as qualified names for brin_summarize_new_values.
SELECT format('%%I.%%I', n.nspname, ix.relname)
FROM pg_inherits AS i
JOIN pg_class AS parent ON parent.oid = i.inhparent
JOIN pg_class AS child ON child.oid = i.inhrelid
JOIN pg_namespace AS n ON n.oid = parent.relnamespace
JOIN pg_index AS x ON x.indrelid = child.oid
JOIN pg_class AS ix ON ix.oid = x.indexrelid
JOIN pg_am AS am ON am.oid = ix.relam AND am.amname = 'brin'
WHERE n.nspname = %(schema)s
  AND parent.relname IN ('jobs_completed', 'jobs_discarded', 'jobs_cancelled')
  AND child.relname ~ '_[0-9]{{8}}$'
  AND to_date(right(child.relname, 8), 'YYYYMMDD') BETWEEN (now() AT TIME ZONE 'UTC')::date - 1
                                                       AND (now() AT TIME ZONE 'UTC')::date

-- name: brin_summarize
-- Summarise the block ranges filled since the last summary (cheap: only new ranges).
SELECT brin_summarize_new_values(%(index)s::regclass)
