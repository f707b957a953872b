"""The SQL seam: the only package that runs statements.

Every statement lives in ``sql/queries/*.sql`` and is loaded by :mod:`.sql`; each module
here runs those of one concern, one typed function or method per query, and database
errors become pgqueue's errors at this boundary (:mod:`.errors`).
"""
