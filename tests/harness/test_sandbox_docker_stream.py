"""The exec stream's first bytes: output the HTTP client read together with the engine's response headers.

docker-py hands out the socket under http.client's buffered reader. When the command's output reached the socket
before the client read the ``101 UPGRADED`` headers (a loaded host), that reader held it, and an exec read from the
socket alone returned exit code 0 with no output (seen in CI: ``echo still here`` gave ``''``).
"""

from __future__ import annotations

import http.client
import socket
import time
from types import SimpleNamespace
from typing import Any

import pytest

from harness.sandbox import OutputCapper, SandboxSpec
from harness.sandbox_docker_io import Demux, hijacked, pump

HEADERS = (b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\nConnection: Upgrade\r\n"
           b"Upgrade: tcp\r\n\r\n")


def _frame(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def _upgraded(payload: bytes) -> tuple[Any, socket.socket]:
    """(docker-py's socket object for a response whose headers and first frames arrived in one piece, peer)."""
    client, engine = socket.socketpair()
    engine.sendall(HEADERS + payload)
    engine.shutdown(socket.SHUT_WR)  # the command exited: the engine ends the stream
    response = http.client.HTTPResponse(client)
    response.begin()
    sock = response.fp.raw  # what docker's _get_raw_response_socket returns on a unix socket
    sock._response = SimpleNamespace(raw=SimpleNamespace(_fp=response))
    return sock, engine


def _read(raw: socket.socket, early: bytes) -> tuple[str, str]:
    out, err = OutputCapper(1 << 10), OutputCapper(1 << 10)
    assert pump(raw, None, Demux(out, err), time.monotonic() + 5, None, early) is True
    return out.result()[0], err.result()[0]


def test_output_read_with_the_headers_is_not_lost() -> None:
    payload = _frame(1, b"still here\n") + _frame(2, b"warn\n")
    sock, engine = _upgraded(payload)
    try:
        raw, early = hijacked(sock)
        assert early == payload  # the buffered reader held the whole stream
        assert _read(raw, early) == ("still here\n", "warn\n")
    finally:
        engine.close()
    sock, engine = _upgraded(payload)
    try:  # the socket alone, as before the fix: the output is gone
        assert _read(sock._sock, b"") == ("", "")
    finally:
        engine.close()


def test_hijacked_takes_a_plain_socket_and_an_empty_buffer() -> None:
    a, b = socket.socketpair()
    try:
        assert hijacked(a) == (a, b"")
        sock, engine = _upgraded(b"")
        raw, early = hijacked(sock)
        assert early == b"" and _read(raw, early) == ("", "")
        engine.close()
    finally:
        a.close()
        b.close()


@pytest.mark.docker
def test_exec_keeps_its_output_when_the_headers_are_read_late(docker_provider: Any,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    begin = http.client.HTTPResponse.begin

    def late(self: http.client.HTTPResponse) -> None:
        time.sleep(0.3)  # a loaded host: the command has written and exited before the client reads the headers
        begin(self)

    with docker_provider.create(SandboxSpec(mem_bytes=128 << 20, pids=32), instance_id="late") as box:
        monkeypatch.setattr(http.client.HTTPResponse, "begin", late)
        for _ in range(3):
            res = box.exec("echo still here; echo oops >&2", timeout=5)
            assert (res.returncode, res.stdout, res.stderr) == (0, "still here\n", "oops\n"), res
