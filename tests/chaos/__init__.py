"""The chaos suite: faults on a schedule against real worker processes and a private
PostgreSQL cluster, checked against DESIGN.md's invariants (I1-I5). See ``run.py``."""
