"""The fault-injecting proxy of the chaos suite (tests/chaos/proxy.py), against small echo
servers (no database): it reaches TCP and Unix-socket targets, and its modes do what the
fault tests rely on."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.proxy import Proxy, unix_socket_path


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


class _TCPEcho(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class _UnixEcho(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


def _serve(server: socketserver.BaseServer) -> Iterator[None]:
    thread = threading.Thread(target=server.serve_forever, name="echo", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture
def tcp_echo() -> Iterator[tuple[str, int]]:
    server = _TCPEcho(("127.0.0.1", 0), _Echo)
    port = int(server.server_address[1])
    yield from (("127.0.0.1", port) for _ in _serve(server))


@pytest.fixture
def unix_echo(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """An echo server on ``<dir>/.s.PGSQL.<port>``, as PostgreSQL names its socket."""
    port = 6543
    server = _UnixEcho(str(tmp_path / f".s.PGSQL.{port}"), _Echo)
    yield from ((str(tmp_path), port) for _ in _serve(server))


@pytest.fixture
def proxy_to(request: pytest.FixtureRequest) -> Iterator[Proxy]:
    """A started proxy to the echo server named by the test's ``target`` parameter."""
    host, port = request.getfixturevalue(request.param)
    proxy = Proxy(host, port)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()


def client(proxy: Proxy) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
    sock.settimeout(10)
    return sock


def roundtrip(sock: socket.socket, payload: bytes) -> bytes:
    sock.sendall(payload)
    return receive(sock, len(payload))


def receive(sock: socket.socket, n: int) -> bytes:
    got = b""
    while len(got) < n and (chunk := sock.recv(4096)):
        got += chunk
    return got


def nothing_arrives(sock: socket.socket, window: float = 0.3) -> bool:
    """True when neither a byte nor a close arrives within ``window`` seconds (a negative
    check: load can only make it pass wrongly, never fail wrongly)."""
    sock.settimeout(window)
    try:
        sock.recv(1)
    except TimeoutError:
        return True
    finally:
        sock.settimeout(10)
    return False


def closed_by_peer(sock: socket.socket) -> bool:
    """True when the peer closed or aborted the connection (EOF or RST, within 10 s)."""
    try:
        sock.sendall(b"x")
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def new_connection_refused(proxy: Proxy) -> bool:
    """True when a new connection is aborted (the reset may come during the handshake)."""
    try:
        sock = client(proxy)
    except ConnectionResetError:
        return True
    with sock:
        return closed_by_peer(sock)


BOTH = pytest.mark.parametrize("proxy_to", ["tcp_echo", "unix_echo"], indirect=True)


def test_a_directory_host_names_the_postgres_unix_socket_in_it() -> None:
    assert unix_socket_path("/run/postgresql", 5432) == "/run/postgresql/.s.PGSQL.5432"
    assert unix_socket_path("/tmp/x/", 6543) == "/tmp/x/.s.PGSQL.6543"
    assert unix_socket_path("127.0.0.1", 5432) is None
    assert unix_socket_path("db.example.com", 5432) is None


@pytest.mark.parametrize(("host", "port", "problem"), [("", 5432, "host is empty"), ("h", 0, "port 0")])
def test_bad_targets_are_refused_with_the_problem_named(host: str, port: int, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Proxy(host, port)


@BOTH
def test_pass_forwards_both_ways(proxy_to: Proxy) -> None:
    with client(proxy_to) as a, client(proxy_to) as b:
        assert roundtrip(a, b"hello") == b"hello"
        assert roundtrip(b, b"x" * 200_000) == b"x" * 200_000
        assert proxy_to.connections == 2


@BOTH
def test_stale_freezes_open_connections_while_new_ones_pass_until_healed(proxy_to: Proxy) -> None:
    with client(proxy_to) as old:
        assert roundtrip(old, b"before") == b"before"
        proxy_to.set_mode("stale")
        old.sendall(b"held")
        with client(proxy_to) as new:
            assert roundtrip(new, b"fresh") == b"fresh"
        assert nothing_arrives(old)
        proxy_to.heal()
        assert receive(old, 4) == b"held"


@BOTH
def test_reset_aborts_open_connections_and_refuses_new_ones_until_healed(proxy_to: Proxy) -> None:
    with client(proxy_to) as old:
        assert roundtrip(old, b"ping") == b"ping"
        proxy_to.set_mode("reset")
        assert closed_by_peer(old)
    assert new_connection_refused(proxy_to)
    proxy_to.heal()
    with client(proxy_to) as again:
        assert roundtrip(again, b"back") == b"back"


@BOTH
def test_blackhole_holds_bytes_and_heal_delivers_them(proxy_to: Proxy) -> None:
    with client(proxy_to) as sock:
        assert roundtrip(sock, b"a") == b"a"
        proxy_to.set_mode("blackhole")
        sock.sendall(b"held")
        assert nothing_arrives(sock)
        proxy_to.heal()
        assert receive(sock, 4) == b"held"


def test_an_unreachable_target_closes_the_client_connection(tmp_path: Path) -> None:
    proxy = Proxy(str(tmp_path), 6543)  # no socket there
    proxy.start()
    try:
        assert new_connection_refused(proxy)
    finally:
        proxy.close()
