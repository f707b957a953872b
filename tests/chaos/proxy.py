"""A small TCP proxy with injectable network faults, controllable while it runs.

Modes (set with :meth:`Proxy.set_mode` from any thread):

* ``pass``: bytes flow both ways untouched;
* ``latency``: each chunk is held for ``delay`` seconds before it is forwarded;
* ``blackhole``: nothing is forwarded (bytes wait, as with a partitioned network), and
  new connections hang; ``heal()`` resumes the held streams;
* ``reset``: every open connection is aborted with a TCP RST and new ones are refused
  the same way, until the mode changes;
* ``stale``: the connections open now freeze for good (as when a stateful firewall or NAT
  forgets them: no FIN, no RST, no answer), while new connections pass.

The target is a TCP ``host``/``port``, or, when ``host`` is a directory (libpq's rule: it
starts with ``/``), the server's Unix socket ``host/.s.PGSQL.port`` in it. Clients always
reach the proxy over TCP.

The proxy runs its own asyncio loop in a daemon thread, so callers can be synchronous.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import threading
from typing import Literal

__all__ = ["Mode", "Proxy", "unix_socket_path"]

Mode = Literal["pass", "latency", "blackhole", "reset", "stale"]
_CHUNK = 65536


def unix_socket_path(host: str, port: int) -> str | None:
    """The Unix socket a libpq ``host``/``port`` pair names, or None for a TCP host."""
    if not host.startswith("/"):
        return None
    return os.path.join(host, f".s.PGSQL.{port}")


class Proxy:
    def __init__(self, target_host: str, target_port: int, *, listen_host: str = "127.0.0.1") -> None:
        if not target_host:
            raise ValueError("proxy target host is empty")
        if not 0 < target_port < 65536:
            raise ValueError(f"proxy target port {target_port} is not in 1..65535")
        self.target = (target_host, target_port)
        self.target_socket = unix_socket_path(target_host, target_port)
        self.listen_host = listen_host
        self.port = 0
        self.mode: Mode = "pass"
        self.delay = 0.0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"proxy->{target_port}", daemon=True)
        self._server: asyncio.Server | None = None
        self._flowing: asyncio.Event | None = None
        self._thawed = asyncio.Event()
        self._writers: set[asyncio.StreamWriter] = set()
        self._frozen: set[asyncio.StreamWriter] = set()  # stale: never written to again
        self._tasks: set[asyncio.Task[None]] = set()

    # -- control (any thread) --------------------------------------------------------

    def start(self) -> int:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self.port

    def set_mode(self, mode: Mode, delay: float = 0.0) -> None:
        asyncio.run_coroutine_threadsafe(self._set_mode(mode, delay), self._loop).result(10)

    def heal(self) -> None:
        self.set_mode("pass")

    def close(self) -> None:
        if not self._thread.is_alive():
            if not self._loop.is_closed():
                self._loop.close()
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    @property
    def connections(self) -> int:
        return len(self._writers) // 2

    # -- inside the loop ------------------------------------------------------------

    async def _start(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._thawed = asyncio.Event()
        self._thawed.set()
        self._server = await asyncio.start_server(self._accept, self.listen_host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _set_mode(self, mode: Mode, delay: float) -> None:
        assert self._flowing is not None
        self.mode, self.delay = mode, delay
        if mode == "blackhole":
            self._flowing.clear()
            return
        self._flowing.set()
        if mode == "reset":
            for writer in list(self._writers):
                _abort(writer)
        elif mode == "stale":
            self._frozen.update(self._writers)
            self._thawed.clear()
        elif mode == "pass":
            self._frozen.clear()
            self._thawed.set()

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            _abort(writer)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        if self._refusing():
            _abort(writer)
            return
        await self._flowing.wait()  # a black hole: the client's connect hangs in the handshake
        if self._refusing():
            _abort(writer)
            return
        try:
            up_reader, up_writer = await self._connect_upstream()
        except OSError:
            _abort(writer)
            return
        self._writers.update((writer, up_writer))
        pumps = [
            asyncio.create_task(self._pump(reader, up_writer)),
            asyncio.create_task(self._pump(up_reader, writer)),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            self._tasks.difference_update(pumps)
            for w in (writer, up_writer):
                self._writers.discard(w)
                self._frozen.discard(w)
                with contextlib.suppress(Exception):
                    w.close()

    async def _connect_upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.target_socket is not None:
            return await asyncio.open_unix_connection(self.target_socket)
        return await asyncio.open_connection(*self.target)

    def _refusing(self) -> bool:
        return self.mode == "reset"

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                data = await reader.read(_CHUNK)
                if not data:
                    break
                await self._flowing.wait()
                if writer in self._frozen:
                    await self._thawed.wait()
                if self.mode == "latency" and self.delay > 0:
                    await asyncio.sleep(self.delay)
                if writer.is_closing():
                    break
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(OSError):
            if writer.can_write_eof() and not writer.is_closing():
                writer.write_eof()


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0), as a firewall or a crashed middlebox would."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport = writer.transport
    transport.abort()
