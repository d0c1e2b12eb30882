"""Tools every authenticated caller may use, built on the service's own state."""

from __future__ import annotations

from mcp.server import MCPServer
from pydantic import BaseModel

from service.db.engine import SessionFactory
from service.identity.models import User
from service.mcp_server.caller import CallerSource


class WhoAmI(BaseModel):
    user_id: str
    username: str
    client_id: str


def register_free_tools(server: MCPServer, sessions: SessionFactory, callers: CallerSource) -> None:
    @server.tool(description="Who the service thinks you are: the account behind your token.")
    async def whoami() -> WhoAmI:
        caller = callers()
        async with sessions() as session:
            user = await session.get(User, caller.user_id)
        if user is None:
            raise ValueError("your account no longer exists")
        return WhoAmI(user_id=user.id, username=user.username, client_id=caller.client_id)
