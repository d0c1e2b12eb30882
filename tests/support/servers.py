"""Real servers for tests: uvicorn on a loopback socket picked by the kernel, in the test's event loop."""

from __future__ import annotations

import socket
from types import TracebackType

from service.web.background_server import bind_loopback as bound_socket
from service.web.background_server import port_of
from service.web.background_server import serve_in_background as serve

__all__ = ["ReservedPort", "bound_socket", "port_of", "serve"]


class ReservedPort:
    """A loopback port that a test serves on more than once: a restarted replica or upstream.

    Closing a listener and binding its port again leaves a gap in which another server, or the
    local end of any connection, may take the port (CI runs two suites at once), and the restart
    fails with EADDRINUSE. This holds the port for the test: a socket bound with SO_REUSEPORT that
    never listens, so connections are refused while nothing serves, and `listener()` binds the same
    port beside it each time a server starts. The kernel never hands a bound port to `bind` on port
    0 or to an outgoing connection.
    """

    def __init__(self) -> None:
        self._holder = bound_socket(share_port=True)
        self.port = port_of(self._holder)

    def listener(self) -> socket.socket:
        """A fresh socket bound on the reserved port, for one server to listen on."""
        return bound_socket(self.port, share_port=True)

    def close(self) -> None:
        self._holder.close()

    def __enter__(self) -> ReservedPort:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
