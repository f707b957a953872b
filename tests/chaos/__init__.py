"""The chaos suite: faults on a schedule against real worker processes and a private
PostgreSQL cluster, checked against the delivery guarantees in docs/guarantees.md. See ``run.py``."""
