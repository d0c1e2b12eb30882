"""Real servers for tests: uvicorn on a loopback socket picked by the kernel, in the test's event loop."""

from service.web.background_server import bind_loopback as bound_socket
from service.web.background_server import port_of
from service.web.background_server import serve_in_background as serve

__all__ = ["bound_socket", "port_of", "serve"]
