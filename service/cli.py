"""`paid-mcp-service` (or `python -m service`): serve, migrate, accounts, tokens and Stripe operations."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import json
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta

from pydantic import ValidationError
from sqlmodel.ext.asyncio.session import AsyncSession

from service import __version__
from service.cli_exit_codes import EXIT_LEASE_HELD, EXIT_LOCK_WAIT, EXIT_USAGE_MISMATCH
from service.db.engine import create_engine_for, create_session_factory
from service.db.migrations import current_revision
from service.identity import service as identity
from service.identity.models import MAX_TOKEN_LABEL_LENGTH, Token
from service.identity.passwords import PasswordHashing
from service.settings import ConfigurationError, Settings, listen_problem

MAX_TOKEN_DAYS = 3650


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="paid-mcp-service", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the HTTP service (uvicorn)")
    serve.add_argument("--host", help="bind address (default: HOST setting)")
    serve.add_argument("--port", type=int, help="port (default: PORT setting)")
    serve.add_argument(
        "--fd",
        type=int,
        help="serve on this inherited, already-bound TCP socket; its address replaces HOST and PORT",
    )
    serve.add_argument(
        "--metrics-fd",
        type=int,
        help="serve /metrics on this inherited, already-bound TCP socket; its port replaces METRICS_PORT",
    )

    commands.add_parser(
        "migrate",
        help="upgrade the database to the latest migration "
        f"(exit {EXIT_LOCK_WAIT}: gave up waiting for a lock, nothing changed; run it again)",
    )

    users = commands.add_parser("users", help="local accounts").add_subparsers(dest="action", required=True)
    create_user = users.add_parser("create", help="create a local account (password prompted, or from stdin)")
    create_user.add_argument("name")
    create_user.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    set_password = users.add_parser("set-password", help="set an account's password (and enable it)")
    set_password.add_argument("name")
    set_password.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    list_users = users.add_parser("list", help="list local accounts")
    list_users.add_argument("--json", action="store_true", help="one JSON array")
    disable_user = users.add_parser("disable", help="refuse sign-ins; revoke tokens and end browser sessions")
    disable_user.add_argument("name")

    tokens = commands.add_parser("tokens", help="personal access tokens").add_subparsers(
        dest="action", required=True
    )
    create_token = tokens.add_parser("create", help="create a token for a user; printed once")
    create_token.add_argument("name", help="the user's name")
    create_token.add_argument("--label", type=_token_label, help="what the token is for")
    lifetime = create_token.add_mutually_exclusive_group()
    lifetime.add_argument(
        "--expires-in-days", type=_positive_days, help="default: PERSONAL_TOKEN_TTL_DAYS (90)"
    )
    lifetime.add_argument("--never-expires", action="store_true", help="a token without an expiry")
    revoke_token = tokens.add_parser("revoke", help="revoke a token by its id (tok_...)")
    revoke_token.add_argument("token_id")
    list_tokens = tokens.add_parser("list", help="list a user's tokens (ids, never secrets)")
    list_tokens.add_argument("name")
    list_tokens.add_argument("--json", action="store_true", help="one JSON array")

    stripe_commands = commands.add_parser("stripe", help="Stripe operations").add_subparsers(
        dest="action", required=True
    )
    stripe_commands.add_parser(
        "sync-plans", help="create the plans' products and prices in the configured Stripe (idempotent)"
    )
    reconcile = stripe_commands.add_parser(
        "reconcile",
        help="read Stripe and repair what missed webhooks left wrong "
        f"(exit {EXIT_LEASE_HELD}: another process holds the lease)",
    )
    reconcile.add_argument("--json", action="store_true", help="the summary as one JSON object")
    usage = stripe_commands.add_parser(
        "report-usage",
        help="send unreported metered calls as meter events, then compare recent ones with Stripe's "
        f"meter event summaries (exit {EXIT_USAGE_MISMATCH}: they differ)",
    )
    usage.add_argument("--hours", type=int, default=24, choices=range(1, 24 * 35 + 1), metavar="1..840")
    replay = stripe_commands.add_parser("replay-events", help="re-run Stripe's events since a time (UTC)")
    replay.add_argument(
        "--since", type=_utc_datetime, required=True, help="ISO 8601, e.g. 2026-11-01T00:00:00Z"
    )
    replay.add_argument("--json", action="store_true", help="the summary as one JSON object")
    sandbox = stripe_commands.add_parser(
        "sandbox", help="serve the Stripe sandbox on its own (for several replicas)"
    )
    sandbox.add_argument("--host", default="127.0.0.1", help="bind address (0.0.0.0 in a container)")
    sandbox.add_argument("--port", type=int, default=8001)
    sandbox.add_argument(
        "--fd",
        type=int,
        help="serve on this inherited, already-bound TCP socket instead of --host and --port",
    )
    sandbox.add_argument(
        "--webhook-url", action="append", default=[], help="endpoint to deliver events to (repeatable)"
    )
    return parser


def _migrate(settings: Settings) -> int:
    import psycopg
    from sqlalchemy.exc import DBAPIError

    from service.db.migrations import upgrade_to_head

    waited = settings.database.migration_lock_timeout_seconds
    try:
        upgrade_to_head(settings.database.url, lock_timeout_seconds=waited)
    except DBAPIError as exc:
        if not isinstance(exc.orig, psycopg.errors.LockNotAvailable):
            raise
        print(
            f"migration stopped, nothing changed: it waited longer than {waited:g} s"
            " (DATABASE_MIGRATION_LOCK_TIMEOUT_SECONDS) for a lock another session holds; run it again",
            file=sys.stderr,
        )
        return EXIT_LOCK_WAIT
    print("database is at the latest migration")
    return 0


def _token_label(value: str) -> str:
    if len(value) > MAX_TOKEN_LABEL_LENGTH:
        raise argparse.ArgumentTypeError(f"labels have at most {MAX_TOKEN_LABEL_LENGTH} characters")
    if any(not character.isprintable() for character in value):
        raise argparse.ArgumentTypeError("labels cannot hold control characters (tabs, newlines ...)")
    return value


def _with_session(settings: Settings, work: Callable[[AsyncSession], Awaitable[int]]) -> int:
    async def run() -> int:
        engine = create_engine_for(settings.database)
        try:
            if await current_revision(engine) is None:
                print("error: the database is not migrated; run `python -m service migrate`", file=sys.stderr)
                return 2
            async with create_session_factory(engine)() as session, session.begin():
                return await work(session)
        finally:
            await engine.dispose()

    return asyncio.run(run())


def _serve(
    settings: Settings,
    host: str | None,
    port: int | None,
    fd: int | None = None,
    *,
    metrics_fd: int | None = None,
    keep_alive_seconds: int = 5,
) -> int:
    """`serve`: logging, tracing and the app as deployed, on an inherited socket `fd` or on `host`
    and `port`, with `/metrics` on the inherited socket `metrics_fd` if given. `keep_alive_seconds`
    is uvicorn's idle keep-alive timeout (its default; the bench keeps connections idle longer
    between its turns)."""
    from service.web.inherited_socket import InheritedSocketError, inherited_listener

    if fd is not None and (host is not None or port is not None):
        print("configuration error: --fd replaces --host and --port", file=sys.stderr)
        return 2
    with contextlib.ExitStack() as sockets:
        try:
            listener = sockets.enter_context(inherited_listener(fd)) if fd is not None else None
            metrics_listener = (
                sockets.enter_context(inherited_listener(metrics_fd)) if metrics_fd is not None else None
            )
        except InheritedSocketError as exc:
            print(f"configuration error: {exc}", file=sys.stderr)
            return 2
        if listener is not None:
            host, port = listener.getsockname()[:2]
        return _serve_on(settings, host, port, listener, keep_alive_seconds, metrics_listener)


def _serve_on(
    settings: Settings,
    host: str | None,
    port: int | None,
    listener: socket.socket | None,
    keep_alive_seconds: int,
    metrics_listener: socket.socket | None = None,
) -> int:
    """Serves on `listener`, or binds `host` and `port` (each defaulting to its setting) without one."""
    import uvicorn
    from opentelemetry import trace

    from service import __version__
    from service.app import create_app
    from service.billing.embedded_sandbox import sandbox_problem
    from service.billing.plans import PlanCatalog, PlanCatalogError
    from service.logging_setup import configure_logging, write_out_before_dying_of
    from service.observability.tracing import TRACER_NAME, flush_spans, tracer_provider
    from service.process_tuning import ProcessTuning
    from service.tool_packages import ToolPackageError, load_tools
    from service.web.draining import Draining, DrainingServer

    http = settings.http.model_copy(
        update={"host": host or settings.http.host, "port": port or settings.http.port}
    )
    settings = settings.model_copy(update={"http": http})
    # `--host` skips the settings' own validation; the sandbox's absence is no settings error.
    if problem := listen_problem(http, development=settings.is_development) or sandbox_problem(
        settings.stripe
    ):
        print(f"configuration error: {problem}", file=sys.stderr)
        return 2
    try:  # refuse here, in one line, rather than in a traceback from inside the lifespan
        catalog = PlanCatalog.load(settings.billing.plans_file)
        tools = load_tools(settings.tools.packages, catalog, entry_points_enabled=settings.tools.entry_points)
        if not settings.gateway.url:  # an upstream's tools are known once it is reached
            catalog.check_plan_tools(tools.paid_tools, tools.free_tool_names)
    except (PlanCatalogError, ToolPackageError) as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.observability.log_level, settings.effective_log_format)
    write_out_before_dying_of(signal.SIGTERM, signal.SIGINT)
    # None unless OTEL_EXPORTER_OTLP_ENDPOINT is set
    tracing = tracer_provider(settings.observability, settings.mcp.server_name)
    if tracing is not None:
        trace.set_tracer_provider(tracing)  # the MCP SDK's spans (MCP_OTEL_SPANS) go there too
    tracer = tracing.get_tracer(TRACER_NAME, __version__) if tracing is not None else None
    app = Draining(
        ProcessTuning(create_app(settings, tracer=tracer, metrics_listener=metrics_listener), settings.tuning)
    )
    config = uvicorn.Config(
        app,
        host=settings.http.host,
        port=settings.http.port,
        # Off: uvicorn's would trust X-Forwarded-For from any loopback caller. The app reads it
        # itself, from TRUSTED_PROXIES only (service/web/client_address.py).
        proxy_headers=False,
        log_level=settings.observability.log_level.lower(),
        # Uvicorn's records go through our handler; its access log (full query strings) is replaced
        # by the request-context middleware's access line.
        log_config=None,
        access_log=False,
        timeout_keep_alive=keep_alive_seconds,
        timeout_graceful_shutdown=25,
    )
    DrainingServer(config, app, after_shutdown=flush_spans(tracing) if tracing is not None else None).run(
        None if listener is None else [listener]
    )
    return 0


def _stripe(settings: Settings, args: argparse.Namespace) -> int:
    from service import cli_stripe

    if args.action == "sandbox":
        return cli_stripe.serve_sandbox(settings, args.host, args.port, args.webhook_url, args.fd)
    try:
        if args.action == "sync-plans":
            return asyncio.run(cli_stripe.sync_plans(settings))
        if args.action == "reconcile":
            return asyncio.run(cli_stripe.reconcile(settings, as_json=args.json))
        if args.action == "report-usage":
            return asyncio.run(cli_stripe.report_usage(settings, args.hours))
        return asyncio.run(cli_stripe.replay_events(settings, args.since, as_json=args.json))
    except cli_stripe.CommandFailed as exc:
        return cli_stripe.report_failures(exc)


def _positive_days(value: str) -> int:
    days = int(value)
    if not 1 <= days <= MAX_TOKEN_DAYS:
        raise argparse.ArgumentTypeError(f"between 1 and {MAX_TOKEN_DAYS} days")
    return days


class PasswordInputError(Exception):
    pass


def read_password(from_stdin: bool) -> str:
    """From stdin's first line with --password-stdin, else prompted twice on the terminal; never argv,
    where other users' `ps` and the shell's history would see it."""
    if from_stdin:
        line = sys.stdin.readline(identity.MAX_PASSWORD_LENGTH + 2)
        return line.removesuffix("\n").removesuffix("\r")
    if not sys.stdin.isatty():
        raise PasswordInputError("no terminal to prompt for the password on; pass it with --password-stdin")
    password = getpass.getpass("Password: ")
    if getpass.getpass("Repeat password: ") != password:
        raise PasswordInputError("the passwords differ")
    return password


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
    except ValidationError as exc:
        # Each problem by setting and reason, never with the value given: it may be a secret.
        for error in exc.errors():
            where = ".".join(str(part) for part in error["loc"]) or "settings"
            print(f"configuration error: {where}: {error['msg']}", file=sys.stderr)
        return 2

    if args.command == "serve":
        return _serve(settings, args.host, args.port, args.fd, metrics_fd=args.metrics_fd)
    if args.command == "stripe":
        return _stripe(settings, args)
    if args.command == "migrate":
        return _migrate(settings)

    password = ""
    if (args.command, args.action) in (("users", "create"), ("users", "set-password")):
        try:
            password = read_password(args.password_stdin)
        except PasswordInputError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1

    async def users_create(session: AsyncSession) -> int:
        user = await identity.create_user(
            session, args.name, password, PasswordHashing.from_settings(settings.password_hashing)
        )
        print(f"created user {user.username} ({user.id})")
        return 0

    async def users_set_password(session: AsyncSession) -> int:
        user = await identity.set_password(
            session, args.name, password, PasswordHashing.from_settings(settings.password_hashing)
        )
        print(f"set the password of {user.username}")
        return 0

    async def users_list(session: AsyncSession) -> int:
        rows = [
            {
                "id": user.id,
                "username": user.username,
                "state": "disabled" if identity.password_is_disabled(user.password_hash) else "active",
                "created": user.created_at.isoformat(),
            }
            for user in await identity.list_users(session)
        ]
        if args.json:
            print(json.dumps(rows))
            return 0
        for row in rows:
            print(f"{row['id']}\t{row['username']}\t{row['state']}\tcreated={row['created']}")
        return 0

    async def users_disable(session: AsyncSession) -> int:
        user = await identity.disable_user(session, args.name)
        print(f"disabled {user.username}: its tokens are revoked and its browser sessions ended")
        return 0

    async def tokens_create(session: AsyncSession) -> int:
        days = args.expires_in_days or settings.identity.personal_token_ttl_days
        ttl = None if args.never_expires else timedelta(days=days)
        issued = await identity.create_personal_token(
            session, args.name, resource=settings.http.mcp_resource_url, label=args.label, ttl=ttl
        )
        print(f"token id: {issued.token.id}", file=sys.stderr)
        expires = issued.token.expires_at.isoformat() if issued.token.expires_at else "never"
        print(f"expires: {expires}", file=sys.stderr)
        print("the token is shown once; store it now:", file=sys.stderr)
        print(issued.secret)
        return 0

    async def tokens_revoke(session: AsyncSession) -> int:
        token = await session.get(Token, args.token_id)
        if token is None or not await identity.revoke_token_by_id(session, args.token_id):
            print(f"no token with id {args.token_id}", file=sys.stderr)
            return 1
        from service.paywall.pg_bus import notify_revocation

        await notify_revocation(session, token.grant_id)  # running replicas drop it from their caches
        print(f"revoked {args.token_id}")
        return 0

    async def tokens_list(session: AsyncSession) -> int:
        rows = [
            {
                "id": token.id,
                "kind": token.kind,
                "state": "revoked" if token.revoked_at else "active",
                "expires": token.expires_at.isoformat() if token.expires_at else None,
                "label": token.label,
            }
            for token in await identity.list_tokens(session, args.name)
        ]
        if args.json:
            print(json.dumps(rows))
            return 0
        for row in rows:
            expires = row["expires"] or "never"
            print(f"{row['id']}\t{row['kind']}\t{row['state']}\texpires={expires}\t{row['label'] or ''}")
        return 0

    handlers = {
        ("users", "create"): users_create,
        ("users", "set-password"): users_set_password,
        ("users", "list"): users_list,
        ("users", "disable"): users_disable,
        ("tokens", "create"): tokens_create,
        ("tokens", "revoke"): tokens_revoke,
        ("tokens", "list"): tokens_list,
    }
    try:
        return _with_session(settings, handlers[(args.command, args.action)])
    except identity.IdentityError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
