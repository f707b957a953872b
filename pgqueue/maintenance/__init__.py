"""Maintenance every worker process runs, as periodic services of one shape: the
scheduler + rescuer tick, finished-job partitions, retention and vacuum."""
