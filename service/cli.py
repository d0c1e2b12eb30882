"""`paid-mcp-service` (or `python -m service`): serve, migrate, accounts, tokens and Stripe operations."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta

from sqlmodel.ext.asyncio.session import AsyncSession

from service import __version__, cli_stripe
from service.billing.plans import PlanCatalog, PlanCatalogError
from service.db.engine import create_engine, create_session_factory
from service.db.migrations import upgrade_to_head
from service.identity import service as identity
from service.identity.passwords import PasswordHashing
from service.logging_setup import configure_logging
from service.settings import ConfigurationError, Settings
from service.tool_packages import ToolPackageError, load_tools


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="paid-mcp-service", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the HTTP service (uvicorn)")
    serve.add_argument("--host", help="bind address (default: HOST setting)")
    serve.add_argument("--port", type=int, help="port (default: PORT setting)")

    commands.add_parser("migrate", help="upgrade the database to the latest migration")

    users = commands.add_parser("users", help="local accounts").add_subparsers(dest="action", required=True)
    create_user = users.add_parser("create", help="create a local account")
    create_user.add_argument("name")
    create_user.add_argument("--password", required=True)

    tokens = commands.add_parser("tokens", help="personal access tokens").add_subparsers(
        dest="action", required=True
    )
    create_token = tokens.add_parser("create", help="create a token for a user; printed once")
    create_token.add_argument("name", help="the user's name")
    create_token.add_argument("--label", help="what the token is for")
    create_token.add_argument("--expires-in-days", type=int, help="default: never expires")
    revoke_token = tokens.add_parser("revoke", help="revoke a token by its id (tok_...)")
    revoke_token.add_argument("token_id")
    list_tokens = tokens.add_parser("list", help="list a user's tokens (ids, never secrets)")
    list_tokens.add_argument("name")

    stripe_commands = commands.add_parser("stripe", help="Stripe operations").add_subparsers(
        dest="action", required=True
    )
    stripe_commands.add_parser(
        "sync-plans", help="create the plans' products and prices in the configured Stripe (idempotent)"
    )
    stripe_commands.add_parser("reconcile", help="read Stripe and repair what missed webhooks left wrong")
    replay = stripe_commands.add_parser("replay-events", help="re-run Stripe's events since a time (UTC)")
    replay.add_argument(
        "--since", type=_utc_datetime, required=True, help="ISO 8601, e.g. 2026-11-01T00:00:00Z"
    )
    sandbox = stripe_commands.add_parser(
        "sandbox", help="serve the Stripe sandbox on its own (for several replicas)"
    )
    sandbox.add_argument("--host", default="127.0.0.1", help="bind address (0.0.0.0 in a container)")
    sandbox.add_argument("--port", type=int, default=8001)
    sandbox.add_argument(
        "--webhook-url", action="append", default=[], help="endpoint to deliver events to (repeatable)"
    )
    return parser


def _with_session(settings: Settings, work: Callable[[AsyncSession], Awaitable[int]]) -> int:
    async def run() -> int:
        engine = create_engine(settings.database_url)
        try:
            async with create_session_factory(engine)() as session, session.begin():
                return await work(session)
        finally:
            await engine.dispose()

    return asyncio.run(run())


def _serve(settings: Settings, host: str | None, port: int | None) -> int:
    import uvicorn

    from service.app import create_app
    from service.process_tuning import ProcessTuning

    settings = settings.model_copy(update={"host": host or settings.host, "port": port or settings.port})
    try:  # refuse here, in one line, rather than in a traceback from inside the lifespan
        load_tools(settings.tool_packages, PlanCatalog.load(settings.plans_file))
    except (PlanCatalogError, ToolPackageError) as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.effective_log_format)
    uvicorn.run(
        ProcessTuning(create_app(settings), settings),
        host=settings.host,
        port=settings.port,
        proxy_headers=True,
        log_level=settings.log_level.lower(),
        # Uvicorn's records go through our handler; its access log (full query strings) is replaced
        # by the request-context middleware's access line.
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=25,
    )
    return 0


def _stripe(settings: Settings, args: argparse.Namespace) -> int:
    if args.action == "sandbox":
        return cli_stripe.serve_sandbox(settings, args.host, args.port, args.webhook_url)
    try:
        if args.action == "sync-plans":
            return asyncio.run(cli_stripe.sync_plans(settings))
        if args.action == "reconcile":
            return asyncio.run(cli_stripe.reconcile(settings))
        return asyncio.run(cli_stripe.replay_events(settings, args.since))
    except cli_stripe.CommandFailed as exc:
        return cli_stripe.report_failures(exc)


def _utc_datetime(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = Settings()
    except ConfigurationError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2

    if args.command == "serve":
        return _serve(settings, args.host, args.port)
    if args.command == "stripe":
        return _stripe(settings, args)
    if args.command == "migrate":
        upgrade_to_head(settings.database_url)
        print("database is at the latest migration")
        return 0

    async def users_create(session: AsyncSession) -> int:
        user = await identity.create_user(
            session, args.name, args.password, PasswordHashing.from_settings(settings)
        )
        print(f"created user {user.username} ({user.id})")
        return 0

    async def tokens_create(session: AsyncSession) -> int:
        ttl = timedelta(days=args.expires_in_days) if args.expires_in_days else None
        issued = await identity.create_personal_token(
            session, args.name, resource=settings.mcp_resource_url, label=args.label, ttl=ttl
        )
        print(f"token id: {issued.token.id}", file=sys.stderr)
        print("the token is shown once; store it now:", file=sys.stderr)
        print(issued.secret)
        return 0

    async def tokens_revoke(session: AsyncSession) -> int:
        if not await identity.revoke_token_by_id(session, args.token_id):
            print(f"no token with id {args.token_id}", file=sys.stderr)
            return 1
        print(f"revoked {args.token_id}")
        return 0

    async def tokens_list(session: AsyncSession) -> int:
        for token in await identity.list_tokens(session, args.name):
            state = "revoked" if token.revoked_at else "active"
            expires = token.expires_at.isoformat() if token.expires_at else "never"
            print(f"{token.id}\t{token.kind}\t{state}\texpires={expires}\t{token.label or ''}")
        return 0

    handlers = {
        ("users", "create"): users_create,
        ("tokens", "create"): tokens_create,
        ("tokens", "revoke"): tokens_revoke,
        ("tokens", "list"): tokens_list,
    }
    try:
        return _with_session(settings, handlers[(args.command, args.action)])
    except identity.IdentityError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
