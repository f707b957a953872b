-- Queries of pgqueue.testing: helpers for users' tests, run against a test database only.
-- They claim one job at a time in the caller's process, look at waiting jobs and move the
-- test's clock (the waiting jobs' timers), never anything a worker depends on.

-- name: testing_claim_next
-- Claim the next due available job of %(queues)s (every queue when NULL) whose task is one
-- of %(tasks)s, in the workers' claim order, under a fresh lease (flow control is not
-- applied: the caller runs one job at a time). A job past its deadline is skipped.
WITH picked AS (
    SELECT id, now() AS started_at
    FROM {schema}.jobs_live
    WHERE state = 'available' AND task = ANY(%(tasks)s::text[])
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
      AND (expires_at IS NULL OR expires_at > now())
    ORDER BY (-priority::integer), run_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
-- include: claim_picked

-- name: testing_claim_job
-- Claim job %(id)s now, whatever its timer (available, scheduled or retryable), under a
-- fresh lease; no row when it does not exist (its transaction rolled back) or is not waiting.
WITH picked AS (
    SELECT id, now() AS started_at
    FROM {schema}.jobs_live
    WHERE id = %(id)s AND state IN ('available', 'scheduled', 'retryable')
    FOR UPDATE
)
-- include: claim_picked

-- name: testing_waiting_jobs
-- Waiting jobs (available, scheduled, retryable) in id order, filtered by task and queue
-- (NULL: any).
SELECT id, task, queue, args, state::text, priority, run_at, attempt, max_attempts, unique_key
FROM {schema}.jobs_live
WHERE state IN ('available', 'scheduled', 'retryable')
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
ORDER BY id

-- name: testing_next_timer
-- Seconds until the first scheduled or retryable job of %(queues)s (NULL: every queue)
-- whose task is one of %(tasks)s becomes due (0 when one is due already); NULL when none waits.
SELECT CASE WHEN min(run_at) IS NOT NULL THEN greatest(extract(epoch FROM min(run_at) - now()), 0) END::float8
FROM {schema}.jobs_live
WHERE state IN ('scheduled', 'retryable') AND task = ANY(%(tasks)s::text[])
  AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))

-- name: testing_advance
-- Move the test's clock %(seconds)s forward for the waiting jobs of %(queues)s (NULL: all):
-- their run_at, scheduled_at and deadline come that much earlier, and those now due
-- become available (what the scheduler would do once that time had passed). Returns the
-- number of jobs that became available.
WITH moved AS (
    UPDATE {schema}.jobs_live
    SET run_at = run_at - make_interval(secs => %(seconds)s::float8),
        scheduled_at = scheduled_at - make_interval(secs => %(seconds)s::float8),
        expires_at = expires_at - make_interval(secs => %(seconds)s::float8),
        state = CASE WHEN state <> 'available' AND run_at - make_interval(secs => %(seconds)s::float8) <= now()
                     THEN 'available' ELSE state END
    WHERE state IN ('available', 'scheduled', 'retryable')
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
    RETURNING state
)
SELECT count(*) FILTER (WHERE state = 'available') FROM moved

-- name: testing_create_database
-- A new database cloned from a template (names validated and quoted by the caller's
-- identifiers).
CREATE DATABASE {name} TEMPLATE {template}

-- name: testing_drop_database
DROP DATABASE IF EXISTS {name} WITH (FORCE)

-- name: testing_end_sessions
-- Reusing a test database: end every other client session on it (a signal; the caller
-- then waits with testing_sessions_left). Returns the pids signalled. The sessions are
-- chosen first (MATERIALIZED) and signalled in the outer select list only: a call in a
-- WHERE clause could be evaluated before the other conditions, for every session.
WITH targets AS MATERIALIZED (
    SELECT pid
    FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
)
SELECT coalesce(array_agg(pid), ARRAY[]::int[])
FROM (SELECT pid, pg_terminate_backend(pid) AS signalled FROM targets) AS t
WHERE signalled

-- name: testing_sessions_left
-- Reusing a test database: wait up to 5 ms for each session of %(pids)s still there to exit
-- (pg_terminate_backend's own wait: it returns false, with a warning, while the process
-- still runs); returns those left. Chosen first, called in the select list only (as in
-- testing_end_sessions).
WITH targets AS MATERIALIZED (
    SELECT pid
    FROM pg_stat_activity
    WHERE pid = ANY(%(pids)s::int[]) AND datname = current_database() AND pid <> pg_backend_pid()
)
SELECT coalesce(array_agg(pid), ARRAY[]::int[])
FROM (SELECT pid, pg_terminate_backend(pid, 5) AS gone FROM targets) AS t
WHERE NOT gone

-- name: testing_prepared_transactions
-- Reusing a test database: prepared transactions on it (they outlive every session).
SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()

-- name: testing_catalogs
-- Reusing a test database: the catalogs that describe its structure, whose rows
-- testing_catalog_digest counts (all of the database's own catalogs but the statistics and
-- large objects' data). DDL inserts, updates or deletes catalog rows, and new row versions
-- carry newer transaction ids, so any DDL changes a catalog's count or its sum of xmins,
-- while DML, VACUUM and ANALYZE change neither.
SELECT c.relname
FROM pg_class c
WHERE c.relnamespace = 'pg_catalog'::regnamespace AND c.relkind = 'r' AND NOT c.relisshared
  AND c.relname NOT IN ('pg_statistic', 'pg_statistic_ext_data', 'pg_largeobject')
ORDER BY 1

-- name: testing_catalog_digest
-- One catalog's part of a test database's structure (testing_catalogs): its name, its row
-- count and the sum of its rows' xmins; the caller runs them as one UNION ALL.
SELECT {catalog_name}::text, count(*), coalesce(sum(xmin::text::bigint), 0)::numeric
FROM pg_catalog.{catalog}

-- name: testing_database_digest
-- The rest of a test database's structure: its own row in pg_database (ALTER DATABASE
-- writes a new version) and its settings (ALTER DATABASE ... SET).
SELECT 'pg_database'::text, count(*), coalesce(sum(xmin::text::bigint), 0)::numeric
FROM pg_database WHERE datname = current_database()
UNION ALL
SELECT 'pg_db_role_setting', count(*), coalesce(sum(s.xmin::text::bigint), 0)::numeric
FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase
WHERE d.datname = current_database()

-- name: testing_used_tables
-- Reusing a test database: the tables (schema, name) that have any storage, the only ones
-- that can hold rows (one ever inserted extends the file); temporary tables excluded.
SELECT n.nspname, c.relname
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'r' AND c.relpersistence <> 't'
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%'
  AND pg_relation_size(c.oid) > 0
ORDER BY 1, 2

-- name: testing_foreign_keys
-- Reusing a test database: which table references which ((schema, name) of both), to
-- empty the referencing ones first.
SELECT rn.nspname, r.relname, fn.nspname, f.relname
FROM pg_constraint k
JOIN pg_class r ON r.oid = k.conrelid JOIN pg_namespace rn ON rn.oid = r.relnamespace
JOIN pg_class f ON f.oid = k.confrelid JOIN pg_namespace fn ON fn.oid = f.relnamespace
WHERE k.contype = 'f' AND k.conrelid <> k.confrelid

-- name: testing_table_digest
-- Reusing a test database: the row count and a digest of the rows of one table.
SELECT count(*), md5(coalesce(string_agg(t::text, E'\n' ORDER BY t::text), ''))
FROM {table_schema}.{table_name} AS t

-- name: testing_empty_table
-- Reusing a test database: delete the rows a test left in one table.
DELETE FROM {table_schema}.{table_name}

-- name: testing_sequences
-- Reusing a test database: every sequence (its quoted name) with its start and its last
-- value (NULL: never used).
SELECT format('%I.%I', schemaname, sequencename), start_value, last_value
FROM pg_sequences
ORDER BY 1

-- name: testing_set_sequence
-- Reusing a test database: put a sequence back as it was.
SELECT setval(%(sequence)s::regclass, %(value)s::bigint, %(called)s::bool)
