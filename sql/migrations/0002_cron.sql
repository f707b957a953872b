-- pgqueue schema, version 2: distributed cron.
--
-- cron_schedules  one row per schedule name, upserted by every worker that declares it:
--                 its definition (as last registered) and its cursor, last_tick. Rows are
--                 never deleted by pgqueue: a schedule removed from code keeps its row and
--                 history, and shows as inactive once no worker has declared it for a while.
-- cron_ticks      one row per fired tick, keyed (schedule, tick): the permanent
--                 "fired once" record, with the job it produced and the worker that fired it.
-- cron_status     the view `pgqueue cron list` reads: definition, cursor, liveness, and the
--                 state of the last tick's job.
--
-- Materialisation (sql/queries/cron.sql) runs in one transaction under
-- pg_try_advisory_xact_lock(hashtextextended('pgqueue.cron:<schema>', 0)).

CREATE TABLE {schema}.cron_schedules (
    name           text        PRIMARY KEY,
    task           text        NOT NULL,
    -- The cron expression, normalised (single spaces, aliases like @daily expanded).
    cron           text        NOT NULL,
    timezone       text        NOT NULL,
    queue          text        NOT NULL,
    priority       smallint    NOT NULL DEFAULT 0,
    args           jsonb       NOT NULL DEFAULT '{{}}',
    missed         text        NOT NULL,
    max_catchup    integer     NOT NULL,
    grace_seconds  float8      NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    -- When cron or timezone last changed: no tick at or before it fires, so a changed
    -- expression never "catches up" on ticks it did not have.
    defined_at     timestamptz NOT NULL DEFAULT now(),
    -- Every tick at or before last_tick was fired or dropped (missed-tick policy); the
    -- scheduler only ever considers ticks after greatest(last_tick, defined_at).
    last_tick      timestamptz,
    -- Refreshed by every running worker that declares the schedule (about every 30 s).
    last_seen_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT cron_schedules_name_length CHECK (char_length(name) BETWEEN 1 AND 150),
    CONSTRAINT cron_schedules_task_length CHECK (char_length(task) BETWEEN 1 AND 200),
    CONSTRAINT cron_schedules_cron_length CHECK (char_length(cron) BETWEEN 1 AND 200),
    CONSTRAINT cron_schedules_timezone_length CHECK (char_length(timezone) BETWEEN 1 AND 100),
    CONSTRAINT cron_schedules_queue_length CHECK (char_length(queue) BETWEEN 1 AND 64),
    CONSTRAINT cron_schedules_missed CHECK (missed IN ('skip', 'latest', 'all')),
    CONSTRAINT cron_schedules_max_catchup CHECK (max_catchup BETWEEN 1 AND 10000),
    CONSTRAINT cron_schedules_grace CHECK (grace_seconds > 0),
    CONSTRAINT cron_schedules_args_object CHECK (jsonb_typeof(args) = 'object')
);

CREATE TABLE {schema}.cron_ticks (
    schedule  text        NOT NULL REFERENCES {schema}.cron_schedules (name) ON DELETE CASCADE,
    tick      timestamptz NOT NULL,
    job_id    bigint      NOT NULL,
    fired_at  timestamptz NOT NULL DEFAULT now(),
    fired_by  text,
    PRIMARY KEY (schedule, tick)
);

CREATE VIEW {schema}.cron_status AS
SELECT s.name,
       s.task,
       s.cron,
       s.timezone,
       s.queue,
       s.priority,
       s.missed,
       s.max_catchup,
       s.grace_seconds,
       -- Declared by a running worker within the last two minutes.
       s.last_seen_at >= now() - interval '2 minutes' AS active,
       s.last_seen_at,
       s.created_at,
       s.defined_at,
       s.last_tick,
       t.tick AS last_fired_tick,
       t.fired_at AS last_fired_at,
       t.fired_by AS last_fired_by,
       t.job_id AS last_job_id,
       j.state AS last_job_state
FROM {schema}.cron_schedules AS s
LEFT JOIN LATERAL (
    SELECT c.tick, c.fired_at, c.fired_by, c.job_id
    FROM {schema}.cron_ticks AS c
    WHERE c.schedule = s.name
    ORDER BY c.tick DESC
    LIMIT 1
) AS t ON true
LEFT JOIN LATERAL (
    SELECT jobs.state FROM {schema}.jobs WHERE jobs.id = t.job_id LIMIT 1
) AS j ON true;

COMMENT ON TABLE {schema}.cron_schedules IS
    'One row per cron schedule, upserted by the workers that declare it: definition and cursor.';
COMMENT ON COLUMN {schema}.cron_schedules.defined_at IS
    'When cron or timezone last changed; no tick at or before it fires.';
COMMENT ON COLUMN {schema}.cron_schedules.last_tick IS
    'Cursor: every tick at or before it was fired or dropped by the missed-tick policy.';
COMMENT ON COLUMN {schema}.cron_schedules.last_seen_at IS
    'Last time a running worker declared this schedule (refreshed about every 30 s).';
COMMENT ON TABLE {schema}.cron_ticks IS
    'Fired ticks, one row per (schedule, tick): the record that stops a tick from firing twice.';

COMMENT ON VIEW {schema}.cron_status IS
    'Cron schedules with their cursor, liveness and the state of the last fired tick''s job.';
COMMENT ON COLUMN {schema}.cron_status.name IS 'Schedule name (unique per schema).';
COMMENT ON COLUMN {schema}.cron_status.task IS 'Task enqueued at every tick.';
COMMENT ON COLUMN {schema}.cron_status.cron IS 'Cron expression (normalised; 6 fields = seconds last).';
COMMENT ON COLUMN {schema}.cron_status.timezone IS 'IANA time zone the expression is read in.';
COMMENT ON COLUMN {schema}.cron_status.queue IS 'Queue of the jobs.';
COMMENT ON COLUMN {schema}.cron_status.priority IS 'Priority of the jobs.';
COMMENT ON COLUMN {schema}.cron_status.missed IS 'Missed-tick policy: skip, latest or all.';
COMMENT ON COLUMN {schema}.cron_status.max_catchup IS 'Most missed ticks fired at once under missed = all.';
COMMENT ON COLUMN {schema}.cron_status.grace_seconds IS 'A tick more overdue than this counts as missed.';
COMMENT ON COLUMN {schema}.cron_status.active IS 'Declared by a running worker within the last two minutes.';
COMMENT ON COLUMN {schema}.cron_status.last_seen_at IS 'Last time a running worker declared the schedule.';
COMMENT ON COLUMN {schema}.cron_status.created_at IS 'First registration.';
COMMENT ON COLUMN {schema}.cron_status.defined_at IS 'Last change of cron or timezone; earlier ticks never fire.';
COMMENT ON COLUMN {schema}.cron_status.last_tick IS 'Cursor: every tick up to here was fired or dropped.';
COMMENT ON COLUMN {schema}.cron_status.last_fired_tick IS 'The latest tick that produced a job.';
COMMENT ON COLUMN {schema}.cron_status.last_fired_at IS 'When that tick was materialised (database clock).';
COMMENT ON COLUMN {schema}.cron_status.last_fired_by IS 'Worker id of the process that materialised it.';
COMMENT ON COLUMN {schema}.cron_status.last_job_id IS 'The job of the latest fired tick.';
COMMENT ON COLUMN {schema}.cron_status.last_job_state IS 'Its state; NULL once retention removed the job.';
