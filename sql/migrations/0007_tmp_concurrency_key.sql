-- TEMPORARY (flow branch): replaced by the enqueue12 branch's 0007 at merge.
ALTER TABLE {schema}.jobs ADD COLUMN concurrency_key text;
ALTER TABLE {schema}.jobs ADD COLUMN expires_at timestamptz;
