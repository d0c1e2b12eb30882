"""Tools anyone with a valid token may call."""

from __future__ import annotations

import re
from collections import Counter

from mcp.server import MCPServer
from pydantic import BaseModel

from service.db.engine import SessionFactory
from service.identity.models import User
from service.mcp_server.caller import current_caller


class WhoAmI(BaseModel):
    user_id: str
    username: str
    client_id: str


class TextStats(BaseModel):
    characters: int
    words: int
    lines: int
    top_words: list[tuple[str, int]]


def text_stats(text: str, top: int = 5) -> TextStats:
    words = re.findall(r"[\w']+", text.lower())
    return TextStats(
        characters=len(text),
        words=len(words),
        lines=len(text.splitlines()) or (1 if text else 0),
        top_words=Counter(words).most_common(max(0, min(top, 50))),
    )


def register_free_tools(server: MCPServer, sessions: SessionFactory) -> None:
    @server.tool(description="Who the service thinks you are: the account behind your token.")
    async def whoami() -> WhoAmI:
        caller = current_caller()
        async with sessions() as session:
            user = await session.get(User, caller.user_id)
        if user is None:
            raise ValueError("your account no longer exists")
        return WhoAmI(user_id=user.id, username=user.username, client_id=caller.client_id)

    server.tool(
        name="text_stats", description="Count characters, words and lines; list the most frequent words."
    )(text_stats)
