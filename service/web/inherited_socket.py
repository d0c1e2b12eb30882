"""A TCP socket the parent process bound and handed down (`serve --fd`), checked before serving."""

from __future__ import annotations

import socket


class InheritedSocketError(Exception):
    pass


def inherited_listener(fd: int) -> socket.socket:
    """The bound IPv4/IPv6 stream socket open as `fd`; its address is where the service listens.

    Family, type and protocol are read from the descriptor, so connections accepted on it are TCP
    to asyncio (which then disables Nagle's algorithm on them) whatever the parent passed.
    """
    if fd < 0:
        raise InheritedSocketError(f"--fd {fd}: not a file descriptor")
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise InheritedSocketError(f"--fd {fd}: not an open socket ({exc.strerror})") from None
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
        sock.detach()  # not ours to close: the descriptor stays as it was
        raise InheritedSocketError(f"--fd {fd}: not a TCP socket")
    if sock.getsockname()[1] == 0:
        sock.detach()
        raise InheritedSocketError(f"--fd {fd}: the socket is not bound to a port")
    return sock
