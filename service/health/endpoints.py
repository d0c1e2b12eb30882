"""`/healthz` says the process serves; `/readyz` says it can do useful work right now."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from service.db.migrations import current_revision
from service.dependencies import RuntimeDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(runtime: RuntimeDep) -> JSONResponse:
    checks: dict[str, str] = {}
    try:
        async with runtime.engine.connect() as connection:
            await connection.execute(text("SELECT 1"))
        checks["database"] = "ok"
        revision = await current_revision(runtime.engine)
        checks["migrations"] = (
            "ok" if revision == runtime.migration_head else f"at {revision}, head is {runtime.migration_head}"
        )
    except Exception as exc:
        checks["database"] = f"unreachable: {type(exc).__name__}"
    ready = all(value == "ok" for value in checks.values()) and "migrations" in checks
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)
