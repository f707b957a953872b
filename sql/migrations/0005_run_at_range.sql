-- pgqueue schema, version 5: keep run_at inside the range every client can represent.
--
-- A job row whose run_at is '-infinity', a BC date or another value outside Python's
-- datetime range poisons every worker of its queue: it sorts first, the claim's
-- now() - run_at fails on an infinite timestamp ("cannot subtract infinite timestamps"),
-- and a BC date fails to load in the worker after the claim committed. The Python API
-- refuses such values (pgqueue._enqueue.RUN_AT_MIN/RUN_AT_MAX); this CHECK refuses them on
-- every other path too: the SQL function enqueue(), a producer's direct INSERT or COPY.
-- On the live partition only (rows are inserted there), so it scans only the live set.
ALTER TABLE {schema}.jobs_live ADD CONSTRAINT jobs_run_at_range
    CHECK (run_at >= '1900-01-01 00:00:00+00' AND run_at < '9999-01-01 00:00:00+00');
