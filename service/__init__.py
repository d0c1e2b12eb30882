"""A paid MCP service: MCP tools behind URL-mode elicitation, Stripe Checkout and verified webhooks."""

from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "paid-mcp-service"

try:
    __version__ = version(DISTRIBUTION)
except PackageNotFoundError:  # imported from a checkout that was never installed
    __version__ = "0+unknown"
