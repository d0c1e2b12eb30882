"""Asking a 2025-11-25 client to open a URL (`elicitation/create` in URL mode), and reading its answer.

The SDK validates what the client answers and raises pydantic's `ValidationError` for anything
that is not an elicitation result (an action other than accept, decline or cancel; content that is
not an object). Escaping a tool, that is a crash: a traceback logged at ERROR for every such
answer, and the caller sees only "Error executing tool". It is the client's mistake, so here it is
no action (None), which callers turn into a tool error saying what was wrong.
"""

from __future__ import annotations

import logging
from typing import Literal

from mcp.server.mcpserver import Context
from pydantic import ValidationError

logger = logging.getLogger(__name__)

ElicitAction = Literal["accept", "decline", "cancel"]


async def ask_to_open(ctx: Context, message: str, url: str, elicitation_id: str) -> ElicitAction | None:
    """The client's answer to opening `url`: its action, or None for a malformed answer."""
    try:
        answer = await ctx.elicit_url(message, url, elicitation_id)
    except ValidationError as exc:
        logger.info("invalid answer to elicitation %s: %d problem(s)", elicitation_id, exc.error_count())
        return None
    return answer.action


def invalid_answer_text(url: str) -> str:
    return (
        f"Your MCP client answered the request to open {url} with something that is not an "
        "elicitation result (its action must be accept, decline or cancel)."
    )
