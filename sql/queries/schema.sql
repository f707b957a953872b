-- Installing and shaping a schema: migrations, the payload cap, finished-job partitions,
-- advisory locks taken by name. Run by pgqueue._schema_db only.

-- name: lock_wait
-- Wait for a transaction-scoped advisory lock (names from pgqueue._sql.lock_name).
SELECT pg_advisory_xact_lock(hashtextextended(%(lock_name)s, 0))

-- name: lock_try
-- Take a transaction-scoped advisory lock if it is free; false when another holds it.
SELECT pg_try_advisory_xact_lock(hashtextextended(%(lock_name)s, 0))

-- name: lock_timeout_local
-- SET LOCAL lock_timeout, with the value bound.
SELECT set_config('lock_timeout', %(timeout)s, true)

-- name: role_set
SET ROLE {role}

-- name: role_reset
RESET ROLE

-- name: schema_missing
-- Whether the schema does not exist yet.
SELECT to_regnamespace(%(schema_name)s) IS NULL

-- name: schema_create
CREATE SCHEMA {schema}

-- name: migrations_create
CREATE TABLE IF NOT EXISTS {schema}.migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)

-- name: migrations_applied
SELECT version FROM {schema}.migrations

-- name: migration_record
INSERT INTO {schema}.migrations (version, name) VALUES (%(version)s, %(name)s)

-- name: migrations_exist
-- Whether the version table exists (its qualified name is bound).
SELECT to_regclass(%(table)s)

-- name: schema_version
SELECT max(version) FROM {schema}.migrations

-- name: payload_limit
-- The server-side cap on a job's stored argument bytes, from its CHECK constraint.
SELECT substring(pg_get_constraintdef(c.oid) from '<= ([0-9]+)')::bigint
FROM pg_constraint c
JOIN pg_class t ON t.oid = c.conrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = %(schema_name)s AND t.relname = 'jobs_live' AND c.conname = 'jobs_args_size'

-- name: payload_limit_set
-- Replace the cap (DDL takes no parameters: {max_bytes} is a quoted literal).
ALTER TABLE {schema}.jobs_live
    DROP CONSTRAINT IF EXISTS jobs_args_size,
    ADD CONSTRAINT jobs_args_size CHECK (pg_column_size(args) <= {max_bytes})

-- name: partition_owner_is_me
-- Whether this session owns (or is a member of the owner of) the finished-job parents.
SELECT pg_has_role(current_user, c.relowner, 'USAGE') FROM pg_class c WHERE c.oid = to_regclass(%(table)s)

-- name: partition_create
-- A day partition {child} of {parent}, created standalone (then attached).
CREATE TABLE {schema}.{child} (LIKE {schema}.{parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
WITH (fillfactor = 100, autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_vacuum_scale_factor = 0.05)

-- name: partition_attach
-- Attach takes only SHARE UPDATE EXCLUSIVE on the parent ({lo}, {hi}: quoted bounds).
ALTER TABLE {schema}.{parent} ATTACH PARTITION {schema}.{child} FOR VALUES FROM ({lo}) TO ({hi})

-- name: partition_create_via_owner
-- For a worker role that may not create tables: the owner's SECURITY DEFINER function.
SELECT {schema}.create_partition(%(parent)s, %(day)s)

-- name: partition_drop
DROP TABLE IF EXISTS {schema}.{child}

-- name: partition_drop_via_owner
SELECT {schema}.drop_partition(%(child)s)

-- name: partition_list
-- The finished-job day partitions: parent, child, its UTC day and the planner's row estimate.
SELECT parent.relname AS parent, child.relname AS child,
       to_date(right(child.relname, 8), 'YYYYMMDD') AS day, child.reltuples::bigint AS reltuples
FROM pg_inherits AS i
JOIN pg_class AS parent ON parent.oid = i.inhparent
JOIN pg_class AS child ON child.oid = i.inhrelid
JOIN pg_namespace AS n ON n.oid = parent.relnamespace
WHERE n.nspname = %(schema_name)s
  AND parent.relname IN ('jobs_completed', 'jobs_discarded', 'jobs_cancelled')
  AND child.relname ~ '_[0-9]{{8}}$'
ORDER BY day, child
