"""The app factory. Building the app does no I/O; the lifespan creates every resource and injects it."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from urllib.parse import urlsplit

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from fastapi.telemetry import TelemetryConfig
from mcp.server import MCPServer
from mcp.server.mcpserver.tools import Tool
from opentelemetry.trace import Tracer
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from service.audit.sampling import AuditSampler
from service.billing.embedded_sandbox import embedded_sandbox
from service.billing.endpoints import router as billing_router
from service.billing.events import BillingEvents
from service.billing.plans import PlanCatalog
from service.billing.redirects import RedirectPolicy
from service.billing.stripe_gateway import StripeGateway
from service.billing.stripe_sync.endpoints import WEBHOOK_PATH, WebhookEndpoint
from service.billing.stripe_sync.reconciler import lease_holder
from service.billing.stripe_sync.verification import WebhookChecks
from service.billing.stripe_sync.wiring import build_stripe_sync
from service.billing.usage_postgres import PostgresDecisions
from service.billing.usage_reporter import UsageReporter
from service.db.engine import SessionLimits, create_engine_for, create_session_factory, pool_limits
from service.db.migrations import head_revision, known_revisions
from service.db.wal import CHECKPOINT_SECONDS, WalCheckpoints
from service.dependencies import ResponseInstead, respond_instead
from service.gateway.wiring import start_gateway
from service.health.endpoints import router as health_router
from service.health.readiness import Readiness
from service.identity.client_registration import MAX_REGISTRATION_BODY_BYTES, REGISTRATION_PATH
from service.identity.endpoints import router as identity_router
from service.identity.known_device import KnownDevices
from service.identity.oauth_provider import DatabaseOAuthProvider, StoredAccessToken
from service.identity.oauth_routes import router as oauth_router
from service.identity.oidc.endpoints import router as oidc_router
from service.identity.oidc.wiring import start_external_identity
from service.identity.passwords import PasswordHashing
from service.identity.sign_in import PasswordSignIn
from service.identity.sign_in_gate import BusySignInGate
from service.identity.throttle import AddressRateLimiter, SignInThrottle, throttle_policy
from service.identity.token_cache import TokenCache
from service.identity.token_throttle import TokenRequestThrottle
from service.identity.token_verifier import StoredTokenVerifier
from service.mcp_server.billing_tools import register_billing_tools
from service.mcp_server.caller import CallerSource, verified_caller
from service.mcp_server.output_cap import ToolOutputCap
from service.mcp_server.server import MCP_PATH, build_mcp_app, build_mcp_server
from service.observability.exposition import router as metrics_router
from service.observability.metrics import ServiceMetrics
from service.observability.request_context import LateBoundRequestCounter, RequestContextMiddleware
from service.observability.wiring import install_observability, watch_resources
from service.paywall.bus import InProcessBus, PaymentWaiters, relay_billing_events
from service.paywall.entitlements import Entitlements
from service.paywall.gate import GateSettings, Paywall
from service.paywall.known_links import KnownLinks
from service.paywall.notifier import SessionNotifier
from service.paywall.pages import router as payment_router
from service.paywall.payment_requests import ElicitationRequests
from service.paywall.pg_bus import PostgresBus
from service.paywall.tool_index import PaidToolIndex
from service.periodic import every
from service.retention import RetentionJob
from service.runtime import Runtime
from service.settings import Settings
from service.tool_packages import load_tools
from service.tool_threads import ToolThreads
from service.web.body_limit import BodyLimit
from service.web.client_address import ClientAddresses, parse_networks
from service.web.cookies import CookiePolicy
from service.web.csrf import CsrfProtect
from service.web.database_unavailable import DatabaseUnavailableMiddleware, database_unavailable
from service.web.pages import STATIC_DIR, Pages
from service.web.routes import TemplateRoute
from service.web.security_headers import SecurityHeadersMiddleware


async def _start_runtime(
    settings: Settings,
    stack: AsyncExitStack,
    callers: CallerSource,
    metrics_listener: socket.socket | None = None,
) -> Runtime:
    """Creates every long-lived resource; `stack` closes them in reverse order at shutdown.
    `callers` tells tools and the paywall who is calling (service/mcp_server/caller.py)."""
    catalog = PlanCatalog.load(settings.billing.plans_file)
    engine = create_engine_for(settings.database)
    stack.push_async_callback(engine.dispose)
    sessions = create_session_factory(engine)
    metrics = ServiceMetrics()
    metrics.declare_plans(plan.id for plan in catalog.all())
    secret_key = settings.http.secret_key.get_secret_value()
    cookies = CookiePolicy(secure=not settings.is_development)

    sandbox = None
    api_base = settings.stripe.api_base
    checkout_domain = "checkout.stripe.com"
    if settings.stripe.embedded_sandbox:
        embedded = await stack.enter_async_context(
            embedded_sandbox(settings.stripe_sandbox, settings.stripe, settings.http.internal_base_url)
        )
        sandbox, api_base = embedded.sandbox, embedded.api_base
        checkout_domain = f"{urlsplit(api_base).netloc} (the built-in Stripe sandbox)"
    gateway = StripeGateway.create(
        settings.stripe.secret_key.get_secret_value(),
        api_base,
        catalog,
        RedirectPolicy.for_environment(settings.is_development),
        observer=metrics,
    )
    stack.push_async_callback(gateway.aclose)
    if sandbox is not None:
        await gateway.sync_plans()

    notifier = SessionNotifier(sessions, hold_for=settings.paywall.elicitation_ttl_seconds)
    verified_tokens: TokenCache[StoredAccessToken] = TokenCache(ttl=settings.identity.token_cache_seconds)

    async def after_reconnect() -> None:
        verified_tokens.clear()  # grants revoked while this replica was not listening
        await notifier.sweep()

    bus: InProcessBus
    if engine.dialect.name == "postgresql" and settings.database.completion_bus == "auto":
        bus = PostgresBus(engine, settings.database.url, on_reconnect=after_reconnect)
    else:
        bus = InProcessBus()  # SQLite means one process: nobody else to tell
    oauth = DatabaseOAuthProvider(
        sessions,
        public_base_url=settings.http.public_base_url,
        resource_url=settings.http.mcp_resource_url,
        secret_key=secret_key,
        access_token_ttl=timedelta(seconds=settings.identity.access_token_ttl_seconds),
        refresh_token_ttl=timedelta(seconds=settings.identity.refresh_token_ttl_seconds),
        code_ttl=timedelta(seconds=settings.identity.authorization_code_ttl_seconds),
        verified=verified_tokens,
        revocations=bus,
    )
    external = await start_external_identity(
        settings.oidc, settings.http, settings.identity, stack, sessions, oauth, cookies
    )
    entitlements = Entitlements(
        sessions,
        grace=timedelta(seconds=settings.billing.past_due_grace_seconds),
        cache_seconds=settings.billing.entitlement_cache_seconds,
        metrics=metrics,
    )
    waiters = PaymentWaiters(max_per_user=settings.paywall.max_payment_waits_per_user)
    for listener in (entitlements.on_change, waiters.on_change, notifier.on_change):
        bus.subscribe(listener)
    if isinstance(bus, PostgresBus):
        await stack.enter_async_context(bus.running())
    await stack.enter_async_context(
        every(settings.paywall.completion_sweep_seconds, notifier.sweep, name="completion-sweep")
    )
    toolset = load_tools(settings.tools.packages, catalog, entry_points_enabled=settings.tools.entry_points)
    upstream = await start_gateway(settings.gateway, stack, catalog)  # empty unless UPSTREAM_MCP_URL is set
    catalog.check_plan_tools(
        toolset.paid_tools.keys() | upstream.paid_tools.keys(), toolset.free_tool_names | upstream.free_tools
    )
    tool_index = PaidToolIndex(catalog, {**toolset.paid_tools, **upstream.paid_tools})
    known_links = KnownLinks(ttl=settings.paywall.payment_link_cache_seconds)
    bus.subscribe(known_links.on_change)
    wal = WalCheckpoints.for_engine(engine)
    if wal is not None:
        await stack.enter_async_context(every(CHECKPOINT_SECONDS, wal.run, name="wal-checkpoint"))
    postgres_decisions = None
    if engine.dialect.name == "postgresql":
        postgres_decisions = await stack.enter_async_context(
            PostgresDecisions.open(settings.database.url, limits=SessionLimits.of(settings.database))
        )
    paywall = Paywall(
        GateSettings(
            public_base_url=settings.http.public_base_url,
            elicitation_style=settings.paywall.elicitation_style,
            elicitation_ttl=timedelta(seconds=settings.paywall.elicitation_ttl_seconds),
            payment_wait_seconds=settings.paywall.payment_wait_seconds,
            retry_wait_seconds=settings.paywall.retry_wait_seconds,
            max_elicitations_per_hour=settings.paywall.max_elicitations_per_hour,
            max_sessions_owed=settings.mcp.max_legacy_sessions_per_user,
        ),
        sessions,
        entitlements,
        waiters,
        notifier,
        tool_index,
        known_links,
        metrics,
        callers=callers,
        wal=wal,
        postgres_decisions=postgres_decisions,
    )
    billing_events = BillingEvents()
    relay_billing_events(billing_events, bus)
    stripe_sync = build_stripe_sync(
        settings.billing, catalog, ElicitationRequests(tool_index), sessions, gateway, billing_events, metrics
    )
    stack.callback(paywall.close)
    watch_resources(metrics, engine, pool_limits(settings.database.url), bus, stripe_sync.processor)
    if postgres_decisions is not None:
        decisions = postgres_decisions
        metrics.watch_usage_decisions(lambda: decisions.waiting, lambda: decisions.deciding)
    await stack.enter_async_context(
        every(
            settings.billing.reconcile_interval_seconds,
            stripe_sync.reconciler.run,
            name="stripe-reconciliation",
            jitter=0.1,
        )
    )
    await stack.enter_async_context(
        every(
            settings.billing.usage_report_interval_seconds,
            UsageReporter(
                sessions,
                gateway,
                catalog,
                holder=lease_holder(),
                settle=timedelta(seconds=settings.billing.usage_report_settle_seconds),
            ).run,
            name="usage-report",
            jitter=0.1,
        )
    )
    await stack.enter_async_context(
        every(
            settings.retention.interval_seconds,
            RetentionJob.from_settings(settings.retention, sessions).run,
            name="retention",
            jitter=0.1,
        )
    )
    threads = ToolThreads(settings.tuning.sync_tool_threads, settings.tuning.sync_tool_threads_per_user)

    def build_mcp(upstream_tools: list[Tool]) -> MCPServer:
        mcp = build_mcp_server(
            settings, oauth, sessions, callers, external.verifier if external else None, tools=upstream_tools
        )
        register_billing_tools(
            mcp,
            sessions,
            catalog,
            callers=callers,
            public_base_url=settings.http.public_base_url,
            grace_seconds=settings.billing.past_due_grace_seconds,
        )
        toolset.install(mcp, paywall, threads)
        return mcp

    mcp = build_mcp([])
    if upstream.tools:  # prebuilt tools go to the constructor: built again, once our names are known
        await upstream.check_names(mcp)
        mcp = build_mcp(upstream.registry_entries(paywall, callers))
    if metrics_listener is not None:
        stack.callback(metrics_listener.close)  # also when metrics are not served at all
    await install_observability(
        settings.observability,
        mcp,
        metrics,
        stack,
        served=settings.metrics_served,
        host=settings.http.host,
        metrics_listener=metrics_listener,
    )
    mcp.middleware.append(ToolOutputCap(settings.tools.max_output_bytes))  # inside the observer
    passwords = PasswordHashing.from_settings(settings.password_hashing)
    stack.callback(passwords.close)
    sign_in_throttle = SignInThrottle(throttle_policy(settings.sign_in))
    return Runtime(
        settings=settings,
        engine=engine,
        sessions=sessions,
        oauth=oauth,
        mcp=mcp,
        pages=Pages(settings.mcp.server_name),
        cookies=cookies,
        csrf=CsrfProtect(secret_key, cookies),
        readiness=Readiness(
            engine,
            head=head_revision(settings.database.url),
            known_revisions=known_revisions(settings.database.url),
            outage_grace=settings.database.readiness_outage_grace_seconds,
            cache_seconds=settings.database.readiness_cache_seconds,
        ),
        catalog=catalog,
        stripe=gateway,
        checkout_domain=checkout_domain,
        bus=bus,
        paywall=paywall,
        notifier=notifier,
        webhooks=stripe_sync.processor,
        reconciler=stripe_sync.reconciler,
        sandbox=sandbox,
        metrics=metrics,
        registration_limiter=AddressRateLimiter(
            per_window=settings.identity.oauth_registrations_per_address_per_hour, window_seconds=3600
        ),
        webhook_checks=WebhookChecks.from_settings(
            settings.stripe, max_json_depth=settings.http.max_json_depth
        ),
        webhook_rejections=AuditSampler(settings.stripe.webhook_rejection_audit_seconds),
        page_audits=AuditSampler(settings.paywall.page_audit_seconds),
        passwords=passwords,
        sign_in=PasswordSignIn(
            sessions,
            passwords,
            sign_in_throttle,
            KnownDevices(secret_key, max_age_seconds=settings.sign_in.known_device_days * 86_400),
        ),
        sign_in_throttle=sign_in_throttle,
        client_addresses=ClientAddresses(parse_networks(settings.http.trusted_proxies)),
        token_verifier=external.verifier if external else StoredTokenVerifier(oauth),
        oidc=external.login if external else None,
    )


# How often sessions the SDK closed for idleness are let go of (their places and held notices).
SESSION_EXPIRY_SECONDS = 30.0


class LateBoundApp:
    """A route's or mount's ASGI app that exists only while the lifespan runs.

    The MCP app is built from lifespan resources (engine, OAuth provider), so it cannot exist when
    the routing table is made; requests that arrive outside the lifespan get a 503.
    """

    def __init__(self) -> None:
        self.app: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.app is None:
            if scope["type"] == "http":
                await JSONResponse({"error": "service is starting or stopping"}, status_code=503)(
                    scope, receive, send
                )
            return
        await self.app(scope, receive, send)


# The service exports no OpenTelemetry data; without this FastAPI checks for a provider per request.
NO_TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}


def create_app(
    settings: Settings | None = None,
    *,
    tracer: Tracer | None = None,
    callers: CallerSource = verified_caller,
    metrics_listener: socket.socket | None = None,
) -> FastAPI:
    """`tracer`: each HTTP request becomes a span of it (service/observability/tracing.py).
    `callers`: who tools run for; only in-process tests pass anything but the verified token's user.
    `metrics_listener`: a socket already bound for `/metrics` (`serve --metrics-fd`); its port
    becomes `METRICS_PORT`, and the app serves its metrics there instead of binding one.

    One middleware stack, declared below, serves every request: `/mcp` and Stripe's webhooks
    included, so every response gets the same request id, access line, security headers, body
    limit and error handling."""
    settings = settings or Settings()
    if metrics_listener is not None:
        metrics_port = int(metrics_listener.getsockname()[1])
        observability = settings.observability.model_copy(update={"metrics_port": metrics_port})
        settings = settings.model_copy(update={"observability": observability})
    mcp_endpoint = LateBoundApp()  # `/mcp`
    mcp_routes = LateBoundApp()  # the SDK's OAuth endpoints and metadata documents
    http_requests = LateBoundRequestCounter()  # counts into the runtime's metrics while it exists

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:  # `_` is `app`, below
        async with AsyncExitStack() as stack:
            app.state.runtime = await _start_runtime(settings, stack, callers, metrics_listener)
            runtime = app.state.runtime
            http_requests.target = runtime.metrics
            stack.callback(setattr, http_requests, "target", None)
            mcp = runtime.mcp
            mcp_http = build_mcp_app(mcp, settings, runtime.token_verifier, runtime.client_addresses)
            app.state.mcp_http = mcp_http  # its session ledger and stream store, for tests and probes
            mcp_http.sessions.on_end(runtime.notifier.release)
            if mcp_http.events is not None:
                mcp_http.sessions.on_end(mcp_http.events.forget)
                await stack.enter_async_context(
                    every(SESSION_EXPIRY_SECONDS, mcp_http.events.sweep, name="sse-event-expiry")
                )
            runtime.metrics.count_legacy_sessions(mcp_http.sessions.total_open)
            await stack.enter_async_context(
                every(SESSION_EXPIRY_SECONDS, mcp_http.sessions.expire_idle, name="legacy-session-expiry")
            )
            # Inside the SDK app's own error middleware, which would otherwise answer 500 first.
            mcp_http.app.add_middleware(DatabaseUnavailableMiddleware)
            await stack.enter_async_context(mcp.session_manager.run())
            mcp_endpoint.app, mcp_routes.app = mcp_http.endpoint, mcp_http.app
            stack.callback(setattr, mcp_endpoint, "app", None)
            stack.callback(setattr, mcp_routes, "app", None)
            yield

    app = FastAPI(
        title=settings.mcp.server_name,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json" if settings.is_development else None,
        telemetry=NO_TELEMETRY,
    )
    app.add_exception_handler(OperationalError, database_unavailable)
    app.add_exception_handler(InterfaceError, database_unavailable)
    app.add_exception_handler(ResponseInstead, respond_instead)  # a dependency's refusal
    app.add_middleware(
        BodyLimit,
        limit=settings.http.max_request_body_bytes,
        per_path={
            WEBHOOK_PATH: settings.http.max_webhook_body_bytes,
            # Unauthenticated, and stored: far less than other routes take.
            REGISTRATION_PATH: min(MAX_REGISTRATION_BODY_BYTES, settings.http.max_request_body_bytes),
        },
    )
    app.add_middleware(BusySignInGate)
    app.add_middleware(TokenRequestThrottle)  # /token, served by service/identity/oauth_routes.py
    app.add_middleware(SecurityHeadersMiddleware, hsts=not settings.is_development)
    # Outermost: every response carries X-Request-ID, and is counted.
    app.add_middleware(RequestContextMiddleware, requests=http_requests, tracer=tracer)
    app.routes.append(TemplateRoute(MCP_PATH, mcp_endpoint))  # any method: the SDK answers
    app.routes.append(TemplateRoute(WEBHOOK_PATH, WebhookEndpoint()))
    app.include_router(health_router)
    app.include_router(identity_router)
    app.include_router(oauth_router)
    app.include_router(oidc_router)
    app.include_router(payment_router)
    app.include_router(billing_router)
    if settings.metrics_served and settings.observability.metrics_port == 0:
        app.include_router(metrics_router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    # Last, so our own routes win: OAuth metadata, /authorize, /token, /register, /revoke.
    app.mount("/", mcp_routes, name="mcp")
    return app
