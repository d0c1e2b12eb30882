"""`/healthz` says the process serves; `/readyz` says it can do useful work right now."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from service.dependencies import ReadinessDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(readiness: ReadinessDep) -> JSONResponse:
    report = await readiness.check()
    return JSONResponse(
        {"ready": report.ready, "checks": report.checks}, status_code=200 if report.ready else 503
    )
