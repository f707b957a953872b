-- pgqueue least-privilege roles for one schema, rendered by pgqueue/roles.py.
--
-- Placeholders (names in braces, substituted with psycopg.sql from validated names; literal
-- braces are doubled): schema (quoted identifier), schema_name (string literal), owner,
-- producer, worker, inspector (quoted role identifiers) and owner_name, producer_name,
-- worker_name, inspector_name (the same as string literals).
--
-- Idempotent: run it after every `pgqueue migrate` (`pgqueue migrate --create-roles` does
-- both). It resets the three non-owner roles' privileges on the schema and grants them
-- again, so it also converges after an upgrade. Run it as a superuser (it creates roles
-- and transfers ownership); all of it runs in one transaction.
--
--   owner      owns the schema and every object in it: migrations, operator functions.
--   producer   enqueue only: EXECUTE on enqueue() (SECURITY DEFINER), and for the Python
--              API's plain INSERT ... RETURNING and COPY: INSERT on the columns a new job
--              sets, SELECT on (id, state, queue) for RETURNING, USAGE on the id sequence.
--              It cannot read args, errors or unique keys, update, delete or claim.
--   worker     what `pgqueue work` needs: read the schema, claim/heartbeat/complete
--              (UPDATE, DELETE on jobs_live; INSERT on jobs, which routes finished rows to
--              the day partitions), its registry and settings rows, cron state and the
--              jobs cron fires, and create or drop day partitions only through the owner's
--              SECURITY DEFINER functions below. No DDL.
--   inspector  SELECT on every table and view of the schema; nothing else.

-- -- roles: NOLOGIN groups, created when missing ------------------------------------------

DO $roles$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY[{owner_name}, {producer_name}, {worker_name}, {inspector_name}] LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END
$roles$;

-- -- ownership: the schema and everything in it belong to the owner role ------------------

ALTER SCHEMA {schema} OWNER TO {owner};

DO $owner$
DECLARE
    o record;
BEGIN
    -- Tables (incl. partitions), views, standalone sequences; indexes, and sequences
    -- owned by a column, follow their table.
    FOR o IN
        SELECT c.oid::regclass AS rel,
               CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW'
                              WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END AS kind
        FROM pg_catalog.pg_class AS c
        WHERE c.relnamespace = {schema_name}::regnamespace
          AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
          AND NOT (c.relkind = 'S' AND EXISTS (
              SELECT FROM pg_catalog.pg_depend AS d
              WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid
                AND d.refclassid = 'pg_catalog.pg_class'::regclass AND d.deptype IN ('a', 'i')))
    LOOP
        EXECUTE format('ALTER %s %s OWNER TO %I', o.kind, o.rel, {owner_name});
    END LOOP;
    FOR o IN
        SELECT p.oid::regprocedure AS fn, CASE p.prokind WHEN 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END AS kind
        FROM pg_catalog.pg_proc AS p
        WHERE p.pronamespace = {schema_name}::regnamespace
    LOOP
        EXECUTE format('ALTER %s %s OWNER TO %I', o.kind, o.fn, {owner_name});
    END LOOP;
    FOR o IN
        SELECT t.oid::regtype AS typ
        FROM pg_catalog.pg_type AS t
        WHERE t.typnamespace = {schema_name}::regnamespace AND t.typtype IN ('e', 'd', 'r', 'm')
    LOOP
        EXECUTE format('ALTER TYPE %s OWNER TO %I', o.typ, {owner_name});
    END LOOP;
END
$owner$;

-- -- partitions for workers: through the owner, checked, nothing else ---------------------
-- Creating and attaching a partition needs ownership of the parent, so workers call these
-- owner-run functions. They accept only a day partition of a finished-job parent, in a
-- bounded window of days, and build every name with format(%I), so no argument can reach
-- any other object. search_path is pinned: nothing in the caller's schemas is consulted.

CREATE OR REPLACE FUNCTION {schema}.create_partition(parent text, day date) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    today date := (now() AT TIME ZONE 'UTC')::date;
    child text := parent || '_' || to_char(day, 'YYYYMMDD');
BEGIN
    IF parent IS NULL OR parent NOT IN ('jobs_completed', 'jobs_discarded', 'jobs_cancelled') THEN
        RAISE EXCEPTION 'create_partition: % is not a finished-job parent', quote_literal(parent)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF day IS NULL OR day < today - 1 OR day > today + 31 THEN
        RAISE EXCEPTION 'create_partition: day % is outside yesterday .. today + 31', day
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF to_regclass(format('%I.%I', {schema_name}, child)) IS NOT NULL THEN
        RETURN false;
    END IF;
    -- Same definition and storage as pgqueue/_partitions.py creates as the owner.
    EXECUTE format('CREATE TABLE %I.%I (LIKE %I.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS) WITH ('
                   'fillfactor = 100, autovacuum_vacuum_insert_scale_factor = 0.05, '
                   'autovacuum_vacuum_scale_factor = 0.05)',
                   {schema_name}, child, {schema_name}, parent);
    EXECUTE format('ALTER TABLE %I.%I ATTACH PARTITION %I.%I FOR VALUES FROM (%L) TO (%L)',
                   {schema_name}, parent, {schema_name}, child,
                   day::text || ' 00:00:00+00', (day + 1)::text || ' 00:00:00+00');
    RETURN true;
END
$fn$;

CREATE OR REPLACE FUNCTION {schema}.drop_partition(child text) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    rel regclass;
    day date;
BEGIN
    IF child IS NULL OR child !~ '^jobs_(completed|discarded|cancelled)_[0-9]{{8}}$' THEN
        RAISE EXCEPTION 'drop_partition: % is not a finished-job day partition', quote_literal(child)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    rel := to_regclass(format('%I.%I', {schema_name}, child));
    IF rel IS NULL THEN
        RETURN false;
    END IF;
    IF NOT EXISTS (
        SELECT FROM pg_catalog.pg_inherits AS i
        WHERE i.inhrelid = rel
          AND i.inhparent IN (to_regclass(format('%I.jobs_completed', {schema_name})),
                              to_regclass(format('%I.jobs_discarded', {schema_name})),
                              to_regclass(format('%I.jobs_cancelled', {schema_name})))
    ) THEN
        RAISE EXCEPTION 'drop_partition: % is not attached to a finished-job parent', quote_literal(child)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    day := to_date(right(child, 8), 'YYYYMMDD');
    IF day >= (now() AT TIME ZONE 'UTC')::date - 1 THEN
        RAISE EXCEPTION 'drop_partition: % is not older than yesterday', quote_literal(child)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    EXECUTE format('DROP TABLE %I.%I', {schema_name}, child);
    RETURN true;
END
$fn$;

ALTER FUNCTION {schema}.create_partition(text, date) OWNER TO {owner};
ALTER FUNCTION {schema}.drop_partition(text) OWNER TO {owner};

-- enqueue() runs as the owner, so producers need no access to the table for it. Its
-- search_path is already pinned to pg_catalog, pg_temp. (A later migration that
-- re-creates it resets this: hence "run this after every migrate".) It is named without
-- its argument types, which schema versions change: there is one enqueue().
ALTER FUNCTION {schema}.enqueue SECURITY DEFINER;

-- -- privileges: reset, then grant ----------------------------------------------------------

REVOKE ALL ON SCHEMA {schema} FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM PUBLIC, {producer}, {worker}, {inspector};
REVOKE ALL ON ALL SEQUENCES IN SCHEMA {schema} FROM PUBLIC, {producer}, {worker}, {inspector};
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA {schema} FROM PUBLIC, {producer}, {worker}, {inspector};

GRANT USAGE ON SCHEMA {schema} TO {producer}, {worker}, {inspector};

-- producer
GRANT EXECUTE ON FUNCTION {schema}.enqueue TO {producer};
GRANT INSERT (task, args, queue, priority, run_at, scheduled_at, max_attempts, concurrency_key, expires_at, state)
    ON {schema}.jobs_live TO {producer};
GRANT SELECT (id, state, queue) ON {schema}.jobs_live TO {producer};
GRANT USAGE ON SEQUENCE {schema}.jobs_id_seq TO {producer};

-- worker
GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {worker};
GRANT UPDATE, DELETE ON {schema}.jobs_live TO {worker};
GRANT INSERT ON {schema}.jobs TO {worker};
GRANT EXECUTE ON FUNCTION {schema}.create_partition(text, date) TO {worker};
GRANT EXECUTE ON FUNCTION {schema}.drop_partition(text) TO {worker};

DO $optional$
BEGIN
    -- Tables of later schema versions, granted when present.
    IF to_regclass(format('%I.worker_registry', {schema_name})) IS NOT NULL THEN
        EXECUTE format('GRANT INSERT, UPDATE, DELETE ON %I.worker_registry TO %I', {schema_name}, {worker_name});
    END IF;
    IF to_regclass(format('%I.settings', {schema_name})) IS NOT NULL THEN
        EXECUTE format('GRANT INSERT, UPDATE ON %I.settings TO %I', {schema_name}, {worker_name});
    END IF;
    -- Cron: every worker declares its schedules and the leader fires their ticks, which
    -- inserts the jobs (with their ids from the sequence) itself.
    IF to_regclass(format('%I.cron_schedules', {schema_name})) IS NOT NULL THEN
        EXECUTE format('GRANT INSERT, UPDATE ON %I.cron_schedules TO %I', {schema_name}, {worker_name});
        EXECUTE format('GRANT INSERT, DELETE ON %I.cron_ticks TO %I', {schema_name}, {worker_name});
        EXECUTE format('GRANT INSERT ON %I.jobs_live TO %I', {schema_name}, {worker_name});
        EXECUTE format('GRANT USAGE ON SEQUENCE %I.jobs_id_seq TO %I', {schema_name}, {worker_name});
    END IF;
    -- Flow control: workers record the queues they serve and claim through the limited
    -- claim, which keeps the rate windows. Pausing and limiting is the owner's.
    IF to_regclass(format('%I.queues', {schema_name})) IS NOT NULL THEN
        EXECUTE format('GRANT INSERT ON %I.queues TO %I', {schema_name}, {worker_name});
        EXECUTE format('GRANT INSERT, DELETE ON %I.rate_starts TO %I', {schema_name}, {worker_name});
        EXECUTE format('GRANT EXECUTE ON FUNCTION %I.claim_lock(text[], text[], text) TO %I',
                       {schema_name}, {worker_name});
        EXECUTE format('GRANT EXECUTE ON FUNCTION %I.claim_pick(text[], integer[], text[], integer, text[], boolean[]) TO %I',
                       {schema_name}, {worker_name});
    END IF;
    -- Unique jobs: retention removes ledger rows that hold nothing any more.
    IF to_regclass(format('%I.unique_keys', {schema_name})) IS NOT NULL THEN
        EXECUTE format('GRANT DELETE ON %I.unique_keys TO %I', {schema_name}, {worker_name});
    END IF;
    -- Results: a producer may wait for the results of jobs (handle.result()). It marks
    -- jobs as awaited (one boolean of the live partition, nothing else) and reads results
    -- through job_results(), which runs as the owner and shows of a failed job only its
    -- last error's type and message: args and full errors stay unreadable. Workers (a
    -- handler may wait for another job) and the inspector may call it too.
    IF to_regprocedure(format('%I.job_results(bigint[])', {schema_name})) IS NOT NULL THEN
        EXECUTE format('ALTER FUNCTION %I.job_results(bigint[]) SECURITY DEFINER', {schema_name});
        EXECUTE format('GRANT SELECT (awaited), UPDATE (awaited) ON %I.jobs_live TO %I', {schema_name}, {producer_name});
        EXECUTE format('GRANT EXECUTE ON FUNCTION %I.job_results(bigint[]) TO %I, %I, %I',
                       {schema_name}, {producer_name}, {worker_name}, {inspector_name});
    END IF;
END
$optional$;

-- inspector
GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {inspector};

-- Tables and views the owner creates later (migrations run with --as-owner, day
-- partitions) are readable by the worker and the inspector without re-running this.
ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA {schema} GRANT SELECT ON TABLES TO {worker}, {inspector};

-- PostgreSQL 17+: let the worker VACUUM the live partition it churns (older versions
-- leave that to autovacuum; the worker's own vacuum is then skipped with a warning).
DO $maintain$
BEGIN
    IF current_setting('server_version_num')::int >= 170000 THEN
        EXECUTE format('GRANT MAINTAIN ON %I.jobs_live TO %I', {schema_name}, {worker_name});
    END IF;
END
$maintain$;
