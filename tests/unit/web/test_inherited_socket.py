"""`serve --fd`: a socket the parent bound is served on; anything else is refused in one line."""

from __future__ import annotations

import os
import resource
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.cli import main
from service.web.inherited_socket import InheritedSocketError, inherited_listener
from tests.support.servers import bound_socket, port_of


@pytest.fixture(autouse=True)
def _no_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """An accepted socket would be served: a missing plans file stops `serve` just after the checks."""
    monkeypatch.chdir("/")
    monkeypatch.setenv("PLANS_FILE", "/nonexistent/plans.toml")


@pytest.fixture
def bound() -> Iterator[socket.socket]:
    with bound_socket() as sock:
        yield sock


def test_a_bound_tcp_socket_is_taken_with_its_address(bound: socket.socket) -> None:
    duplicate = os.dup(bound.fileno())
    with inherited_listener(duplicate) as listener:
        assert listener.getsockname() == ("127.0.0.1", port_of(bound))
        assert listener.proto == socket.IPPROTO_TCP


def test_serve_gets_past_the_socket_checks_with_a_bound_socket(
    bound: socket.socket, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--fd", str(os.dup(bound.fileno()))]) == 2
    assert "nonexistent/plans.toml" in capsys.readouterr().err


def test_a_closed_descriptor_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    fd = resource.getrlimit(resource.RLIMIT_NOFILE)[0]  # one past the highest a process may have open
    assert main(["serve", "--fd", str(fd)]) == 2
    assert f"--fd {fd}: not an open socket" in capsys.readouterr().err


def test_a_file_is_refused(tmp_path: Path) -> None:
    with (tmp_path / "f").open("w") as file, pytest.raises(InheritedSocketError, match="not an open socket"):
        inherited_listener(file.fileno())


def test_an_unbound_socket_is_refused_and_left_open() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        with pytest.raises(InheritedSocketError, match="not bound to a port"):
            inherited_listener(sock.fileno())
        assert sock.fileno() != -1
        os.fstat(sock.fileno())  # still open


def test_a_udp_socket_is_refused() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        with pytest.raises(InheritedSocketError, match="not a TCP socket"):
            inherited_listener(sock.fileno())


def test_fd_with_host_or_port_is_refused(bound: socket.socket, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--fd", str(bound.fileno()), "--port", "8000"]) == 2
    assert "--fd replaces --host and --port" in capsys.readouterr().err


def test_a_closed_metrics_descriptor_is_refused(
    bound: socket.socket, capsys: pytest.CaptureFixture[str]
) -> None:
    fd = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert main(["serve", "--fd", str(os.dup(bound.fileno())), "--metrics-fd", str(fd)]) == 2
    assert f"--fd {fd}: not an open socket" in capsys.readouterr().err
