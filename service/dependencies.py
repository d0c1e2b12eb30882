"""FastAPI dependency aliases: the runtime, a database session that commits on success, the browser user."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from sqlmodel.ext.asyncio.session import AsyncSession

from service.identity import service as identity
from service.identity.models import User
from service.runtime import Runtime
from service.web.cookies import SESSION_COOKIE


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


async def get_session(runtime: RuntimeDep) -> AsyncIterator[AsyncSession]:
    """One transaction per request: committed when the endpoint returns, rolled back if it raises."""
    async with runtime.sessions() as session, session.begin():
        yield session


# scope="function": commit before the response leaves, so a client that follows a redirect at once
# (a browser after login, a second press of the pay button) always sees what this request wrote.
SessionDep = Annotated[AsyncSession, Depends(get_session, scope="function")]


async def get_browser_user(request: Request, runtime: RuntimeDep, session: SessionDep) -> User | None:
    return await identity.browser_session_user(
        session, request.cookies.get(runtime.cookies.name(SESSION_COOKIE))
    )


BrowserUser = Annotated[User | None, Depends(get_browser_user)]
