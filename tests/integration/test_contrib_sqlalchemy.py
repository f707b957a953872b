"""Enqueue through SQLAlchemy (psycopg 3 dialect), sync and async, on a real database:
the job commits and rolls back with the ORM's writes; other drivers are refused."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import pgqueue
from pgqueue.contrib import sqlalchemy as pq_sa
from tests.conftest import job_states


class Base(DeclarativeBase):
    pass


class Upload(Base):
    __tablename__ = "uploads"
    id: Mapped[int] = mapped_column(primary_key=True)
    path: Mapped[str]


def url(dsn: str, driver: str) -> sa.URL:
    info = conninfo_to_dict(dsn)
    return sa.URL.create(
        f"postgresql+{driver}",
        username=str(info.get("user") or "postgres"),
        password=str(info["password"]) if info.get("password") else None,
        host=str(info.get("host", "127.0.0.1")),
        port=int(str(info.get("port", 5432))),
        database=str(info["dbname"]),
    )


@pytest.fixture
def engine(dsn: str) -> Iterator[sa.Engine]:
    eng = sa.create_engine(url(dsn, "psycopg"))
    Base.metadata.create_all(eng)
    yield eng
    eng.dispose()


@pytest.fixture
async def aengine(dsn: str, engine: sa.Engine) -> AsyncIterator[AsyncEngine]:
    eng = create_async_engine(url(dsn, "psycopg"))
    yield eng
    await eng.dispose()


@pytest.fixture
def resize(app: pgqueue.App) -> pgqueue.Task[Any, Any]:
    @app.task(name="resize")
    def resize(upload_id: int) -> None:
        pass

    return resize


def test_session_commit_keeps_the_job_and_rollback_drops_it(
    engine: sa.Engine, app: pgqueue.App, resize: pgqueue.Task[Any, Any], conn: psycopg.Connection[Any]
) -> None:
    with Session(engine) as session, session.begin():
        session.add(Upload(id=1, path="/u/1"))
        job_id = pq_sa.enqueue(session, resize, upload_id=1)
        assert job_states(conn) == {}  # not committed yet
    assert conn.execute("SELECT task, args FROM pgqueue.jobs WHERE id = %s", [job_id]).fetchone() == (
        "resize",
        {"upload_id": 1},
    )
    with Session(engine) as session:
        session.add(Upload(id=2, path="/u/2"))
        pq_sa.enqueue(session, "resize", app=app, upload_id=2)
        session.rollback()
    assert job_states(conn) == {"available": 1}
    assert conn.execute("SELECT count(*) FROM uploads").fetchone() == (1,)


def test_connection_needs_a_transaction(
    engine: sa.Engine, resize: pgqueue.Task[Any, Any], conn: psycopg.Connection[Any]
) -> None:
    with engine.connect() as c:
        with c.begin():
            c.execute(sa.text("INSERT INTO uploads VALUES (3, '/u/3')"))
            pq_sa.enqueue(c, resize, upload_id=3)
        with pytest.raises(pgqueue.ConfigError, match=r"no transaction open.*conn\.begin\(\)"):
            pq_sa.enqueue(c, resize, upload_id=4)
        with c.begin() as tx:
            pq_sa.enqueue(c, resize, upload_id=5)
            tx.rollback()
    assert [r[0] for r in conn.execute("SELECT args->>'upload_id' FROM pgqueue.jobs")] == ["3"]


def test_other_drivers_are_refused(dsn: str, resize: pgqueue.Task[Any, Any]) -> None:
    psycopg2_engine = sa.create_engine(url(dsn, "psycopg2"))
    with Session(psycopg2_engine) as session, pytest.raises(pgqueue.ConfigError, match=r"postgresql\+psycopg2"):
        pq_sa.enqueue(session, resize, upload_id=1)
    psycopg2_engine.dispose()
    sqlite = sa.create_engine("sqlite://")
    with sqlite.connect() as c, c.begin(), pytest.raises(pgqueue.ConfigError, match=r"sqlite\+pysqlite"):
        pq_sa.enqueue(c, resize, upload_id=1)
    with pytest.raises(pgqueue.ConfigError, match="Session or Connection"):
        pq_sa.enqueue(object(), resize, upload_id=1)  # type: ignore[arg-type]


async def test_async_session_commit_and_rollback(
    aengine: AsyncEngine, resize: pgqueue.Task[Any, Any], conn: psycopg.Connection[Any]
) -> None:
    async with AsyncSession(aengine) as session:
        async with session.begin():
            session.add(Upload(id=10, path="/u/10"))
            await pq_sa.enqueue_async(session, resize, upload_id=10)
        async with session.begin():
            session.add(Upload(id=11, path="/u/11"))
            await pq_sa.enqueue_async(session, resize, upload_id=11)
            await session.rollback()
    assert [r[0] for r in conn.execute("SELECT args->>'upload_id' FROM pgqueue.jobs")] == ["10"]
    assert conn.execute("SELECT id FROM uploads").fetchall() == [(10,)]


async def test_async_connection(
    aengine: AsyncEngine, resize: pgqueue.Task[Any, Any], conn: psycopg.Connection[Any]
) -> None:
    async with aengine.connect() as c:
        with pytest.raises(pgqueue.ConfigError, match="no transaction open"):
            await pq_sa.enqueue_async(c, resize, upload_id=20)
        async with c.begin():
            handle = await pq_sa.enqueue_async(c, resize, upload_id=21)
    assert isinstance(handle, pgqueue.JobHandle)
    assert job_states(conn) == {"available": 1}
