"""The handle enqueue returns: the job's id (an ``int``, usable wherever the id was) that can
also wait for the job's result."""

from __future__ import annotations

from typing import Any, Protocol, Self

__all__ = ["JobHandle", "ResultSource"]


class ResultSource(Protocol):
    """Where a handle's waits go (a :class:`~pgqueue.App`)."""

    def wait_result(self, job_id: int, timeout: float | None) -> Any: ...
    async def wait_result_async(self, job_id: int, timeout: float | None) -> Any: ...


class JobHandle(int):
    """A job's id, returned by ``task.enqueue(...)``, that can wait for the job's result.

    It *is* the id: an ``int`` that compares, hashes, formats, binds as a query parameter
    and encodes to JSON like the plain id (``handle == 42``, ``{"job": handle}``,
    ``conn.execute("... WHERE id = %s", [handle])``), and pickles as a plain ``int``.

    :meth:`result` blocks until the job finished and returns what its handler returned
    (decoded from JSON; None when it returned None); :meth:`result_async` awaits it. Both
    raise :class:`~pgqueue.JobFailed` when the job was discarded, cancelled or expired,
    :class:`~pgqueue.ResultTimeout` when ``timeout`` seconds passed first (None: wait as
    long as it takes), and :class:`~pgqueue.JobNotFoundError` for a job that does not
    exist (its enqueue was not committed yet, or was rolled back).

    Waiting needs the job's transaction to have committed, and the app's database
    (``App(dsn=...)``, ``$PGQUEUE_DSN``): every wait of the process shares one listening
    connection to it.
    """

    _source: ResultSource | None

    def __new__(cls, job_id: int, source: ResultSource | None = None) -> Self:
        handle = super().__new__(cls, job_id)
        handle._source = source
        return handle

    @property
    def id(self) -> int:
        """The job's id as a plain ``int``."""
        return int(self)

    def result(self, timeout: float | None = None) -> Any:
        """Block until the job finished; return its result.

        Raises:
            JobFailed: the job was discarded, cancelled or expired (carries its last error).
            ResultTimeout: it did not finish within ``timeout`` seconds.
            JobNotFoundError: no such job (its enqueue has not committed, or rolled back).
        """
        return self._bound().wait_result(int(self), timeout)

    async def result_async(self, timeout: float | None = None) -> Any:
        """:meth:`result` for asyncio code: awaits without blocking the loop."""
        return await self._bound().wait_result_async(int(self), timeout)

    def _bound(self) -> ResultSource:
        if self._source is None:
            raise TypeError(f"job handle {int(self)} is not bound to an app: use app.handle(job_id)")
        return self._source

    def __repr__(self) -> str:
        return f"JobHandle({int(self)})"

    # str() and %s give the bare number, as for the plain id (int's own __str__ would call
    # the __repr__ above).
    __str__ = int.__repr__

    def __reduce__(self) -> tuple[Any, ...]:
        return (int, (int(self),))
