"""The one configuration object, read from the environment (and an optional `.env` file).

Every default is an embedded-development default: SQLite in `./var`, the built-in Stripe sandbox,
well-known development secrets. Outside development mode those defaults are refused at start-up,
so a production deployment cannot run on a secret that is printed in this file.
"""

from __future__ import annotations

import os
from functools import cached_property
from ipaddress import ip_network
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SecretsSettingsSource,
    SettingsConfigDict,
)

from service.billing.plans import DEFAULT_PLANS_FILE
from service.gateway.config import is_loopback_host, upstream_url_problem

DEV_SECRET_KEY = "dev-only-secret-key-change-me"  # noqa: S105 - the refused-outside-development default
DEV_WEBHOOK_SECRET = "whsec_dev_sandbox_secret"  # noqa: S105
DEV_REQUEST_STATE_KEY = "ZGV2LW9ubHktcmVxdWVzdC1zdGF0ZS1rZXktMzJieXQ="
SANDBOX_SECRET_KEY = "sk_test_sandbox"  # noqa: S105 - the key the built-in sandbox accepts


class ConfigurationError(Exception):
    """The settings are unsafe for the chosen environment; the message says what to change."""


def _split_csv(value: object) -> object:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


CsvList = Annotated[list[str], NoDecode]


class Settings(BaseSettings):
    """Service configuration. Field names map to upper-case environment variables."""

    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        frozen=True,
        validate_default=True,
        use_attribute_docstrings=True,
    )

    # Each field's docstring is its description in docs/configuration.md (`make docs`).

    environment: Literal["development", "production"] = "development"
    """`production` refuses development secrets, the sandbox key and plain `http://`, and turns on `Secure`
    `__Host-` cookies and HSTS."""
    host: str = "127.0.0.1"
    """The address `serve` listens on."""
    allow_non_loopback_in_development: bool = False
    """Let development settings listen beyond loopback; their well-known secrets and the sandbox are only
    safe there."""
    port: int = Field(default=8000, ge=1, le=65535)
    """The port `serve` listens on."""
    public_base_url: str = "http://127.0.0.1:8000"
    """The URL users and clients reach; the issuer, the MCP resource and payment links derive from it."""
    database_url: str = "sqlite:///./var/service.db"
    """`sqlite:///path` or `postgresql://user:pass@host:port/db`."""
    sqlite_synchronous: Literal["full", "normal"] = "normal"
    """SQLite's `synchronous` (the database is always in WAL mode): `normal` keeps every commit through a
    crash of the process and may lose the latest ones to a power loss or OS crash; `full` syncs the log
    at every commit. See docs/adr/0006-sqlite-synchronous-normal.md."""
    secret_key: SecretStr = SecretStr(DEV_SECRET_KEY)
    """Signs login requests and CSRF tokens; 32 characters or more in production."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """The least severe log level written."""
    log_format: Literal["json", "text"] | None = None
    """Log line format; unset: text in development, JSON otherwise."""
    metrics_enabled: bool | None = None
    """Serve Prometheus `/metrics`; unset: on in development or when `METRICS_PORT` is set, off otherwise."""
    metrics_port: int = Field(default=0, ge=0, le=65535)
    """`0` serves `/metrics` on the main app; any other port on a listener of its own (keep it out of the
    Service and Ingress)."""
    otel_exporter_otlp_endpoint: str | None = Field(
        default=None, max_length=2048, pattern=r"^https?://[^\s]+$"
    )
    """The OTLP/HTTP base URL of an OpenTelemetry collector; with the `otel` extra installed, `serve`
    sends a span per request there and log lines carry trace ids. Unset: no tracing."""

    mcp_server_name: str = "paid-mcp-service"
    """The MCP server name; also the audience of sealed `request_state`, so the same on every replica."""
    mcp_allowed_hosts: CsvList = []
    """Extra `Host` values accepted on `/mcp`; the public host and loopback always are."""
    mcp_allowed_origins: CsvList = []
    """Extra `Origin` values accepted on `/mcp`; the public origin always is, and loopback in development."""
    request_state_keys: CsvList = [DEV_REQUEST_STATE_KEY]
    """Keys sealing 2026-07-28 `request_state`, newest first: the first seals, all open; the same on every
    replica."""
    mcp_json_response: bool = False
    """Answer 2025-11-25 requests as JSON instead of SSE; needs `ELICITATION_STYLE=error`."""
    mcp_sdk_workarounds: bool = True
    """Apply the measured workarounds of the `mcp` SDK's per-call defaults (`service/compat/mcp.py`,
    ADR 0005), each also off on an SDK version it was not checked on; false keeps every SDK default."""
    mcp_otel_spans: bool = False
    """Keep the SDK's OpenTelemetry span per MCP message; useful only with an exporter installed
    (`OTEL_EXPORTER_OTLP_ENDPOINT` with the `otel` extra, or one around the service)."""
    mcp_resumable_streams: bool = False
    """Let a 2025-11-25 client resume a POST's SSE stream it lost (SEP-1699): each stream opens with
    a priming event (an id and a `retry:` hint) and its messages are kept, bounded, in this
    replica's memory, so a reconnect with `Last-Event-ID` gets what it missed. Only the replica
    holding the session can resume it (session affinity). Off by default: it costs about 6% of the
    CPU of a 2025-11-25 SSE tool call (docs/operations.md). Ignored with `MCP_JSON_RESPONSE=true`,
    which has no streams."""
    mcp_resumable_events_per_stream: int = Field(default=32, ge=2, le=10_000)
    """Messages kept per stream (a tool call's progress, elicitations and its result); older ones go
    first, and a client that missed one of those cannot resume."""
    mcp_resumable_streams_per_session: int = Field(default=16, ge=1, le=10_000)
    """Streams kept per session; the oldest goes first."""
    mcp_resumable_seconds: float = Field(default=300.0, ge=1, le=24 * 3600)
    """How long a kept message can be replayed."""
    mcp_resumable_max_bytes: int = Field(default=32 * 1024 * 1024, ge=64 * 1024, le=16 * 1024**3)
    """Memory all kept messages of this replica may use (their JSON plus a per-message overhead);
    beyond it the oldest streams go first."""
    mcp_sse_retry_ms: int = Field(default=1000, ge=0, le=600_000)
    """The `retry:` an SSE priming event carries: how long a client waits before reconnecting."""

    stripe_secret_key: SecretStr = SecretStr(SANDBOX_SECRET_KEY)
    """Stripe's secret API key; the default is the built-in sandbox's, which production refuses."""
    stripe_webhook_secret: CsvList = [DEV_WEBHOOK_SECRET]
    """Webhook signing secrets: the first signs (sandbox), all verify, for rotation."""
    stripe_api_base: str | None = None
    """Another Stripe API base URL, e.g. a sandbox run separately; refused in production."""
    stripe_sandbox_port: int = Field(default=8001, ge=0, le=65535)
    """Loopback port of the built-in Stripe sandbox; `0` picks any free port."""
    stripe_sandbox_state_file: Path | None = Path("var/stripe-sandbox.json")
    """Where the built-in Stripe sandbox keeps its objects between runs."""
    stripe_sandbox_adversarial: bool = False
    """The sandbox delivers webhooks late, out of order and twice, as Stripe may."""
    stripe_sandbox_webhook_retry_schedule: Literal["compressed", "stripe"] = "compressed"
    """How the sandbox retries a webhook its endpoint did not accept: `compressed`, Stripe's shape
    within about 15 minutes; `stripe`, Stripe's own schedule over 3 days."""
    stripe_sandbox_webhook_ordered: bool = False
    """Deliver the sandbox's webhooks in the order they were emitted (Stripe's order varies, and so
    does the sandbox's by default)."""
    stripe_sandbox_rate_limit: bool = False
    """The sandbox answers 429 past Stripe test mode's rate limit (25 requests a second), so that
    retry code gets exercised."""

    plans_file: Path = DEFAULT_PLANS_FILE
    """The plan catalog (TOML); the default is the built-in `default_plans.toml`."""
    tool_packages: CsvList = ["service.example_tools:tools"]
    """Tool packages to serve, `module:attribute` each."""
    tool_entry_points: bool = False
    """Also load the `paid_mcp.tools` entry points of installed distributions; off, only `TOOL_PACKAGES`."""
    elicitation_style: Literal["error", "request"] = "error"
    """For 2025-11-25 clients: `error` answers `-32042` with the payment link; `request` sends
    `elicitation/create` and waits."""
    elicitation_ttl_seconds: int = Field(default=24 * 3600, ge=60)
    """How long a payment link stays valid."""
    payment_wait_seconds: float = Field(default=600.0, gt=0)
    """How long an accepted `elicitation/create` waits for the payment."""
    retry_wait_seconds: float = Field(default=25.0, ge=0)
    """How long a 2026-07-28 retry waits for the payment before asking again."""
    past_due_grace_seconds: int = Field(default=3 * 24 * 3600, ge=0)
    """Access kept while a subscription is `past_due`."""
    entitlement_cache_seconds: float = Field(default=30.0, ge=0)
    """Lifetime of the in-process entitlement cache; webhooks invalidate it sooner."""
    token_cache_seconds: float = Field(default=30.0, ge=0)
    """How long a verified bearer token is remembered in process; it bounds how long a token revoked
    elsewhere keeps working."""
    max_elicitations_per_hour: int = Field(default=20, ge=1)
    """Payment links one user may be sent in an hour."""
    max_legacy_sessions_per_user: int = Field(default=10, ge=1, le=100_000)
    """Open 2025-11-25 sessions per user (the SDK's own cap is for the whole process); also how many
    sessions one elicitation keeps owed its completion notice."""
    payment_link_cache_seconds: float = Field(default=30.0, ge=0, le=3600)
    """How long a caller's open payment link is remembered, so repeated unpaid calls skip the database."""
    mcp_session_idle_seconds: float = Field(default=1800.0, ge=1, le=7 * 24 * 3600)
    """A 2025-11-25 session with no request in flight for this long is closed (the SDK's idle timeout)."""
    max_checkouts_per_hour: int = Field(default=10, ge=1)
    """Stripe Checkout Sessions one user may create in an hour."""
    max_pay_attempts_per_user_per_hour: int = Field(default=30, ge=1, le=10_000)
    """Presses of the pay button by one user in an hour, counted before any Stripe call; beyond them, 429."""
    max_pay_attempts_per_elicitation_per_hour: int = Field(default=10, ge=1, le=10_000)
    """Presses of the pay button for one payment link in an hour; beyond them, 429."""
    reconcile_interval_seconds: float = Field(default=600.0, ge=0)
    """How often each replica tries to reconcile with Stripe, one replica at a time; `0`: never."""
    usage_report_interval_seconds: float = Field(default=60.0, ge=0, le=86400)
    """How often each replica tries to send recorded metered calls to Stripe as meter events, one
    replica at a time (a failed event is retried with backoff); `0`: never."""
    completion_sweep_seconds: float = Field(default=5.0, ge=0)
    """How often each replica looks for completion notices it still owes."""
    readiness_outage_grace_seconds: float = Field(default=30.0, ge=0, le=600)
    """How long `/readyz` keeps answering ready while a database it reached before does not answer; `0`:
    unready at once."""
    completion_bus: Literal["auto", "local"] = "auto"
    """`auto`: LISTEN/NOTIFY on PostgreSQL; `local` skips it (e.g. behind PgBouncer in transaction mode)
    and the sweep still delivers."""
    reconcile_lookback_days: int = Field(default=3, ge=1, le=30)
    """How far back reconciliation reads Checkout Sessions."""
    reconcile_steps_per_second: float = Field(default=5.0, ge=0)
    """Reconciliation's pace in checkouts or customers a second, one to three Stripe reads each, shared
    with webhook handling's reads (Stripe allows 25 a second in test mode, 100 live); `0`: unpaced."""

    max_request_body_bytes: int = Field(default=1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    """Largest request body accepted on any route, `/mcp` and pages included; a larger one is answered 413."""
    max_webhook_body_bytes: int = Field(default=512 * 1024, ge=1024, le=64 * 1024 * 1024)
    """Largest `POST /webhooks/stripe` body accepted; a larger one is answered 413."""
    max_json_depth: int = Field(default=64, ge=4, le=512)
    """Deepest nesting of objects and arrays accepted in `/mcp` and webhook JSON."""
    max_tool_output_bytes: int = Field(default=256 * 1024, ge=1024, le=64 * 1024 * 1024)
    """Largest tool result (content plus structured content); a larger one is replaced by a tool error
    giving its size."""
    webhook_tolerance_seconds: int = Field(default=300, ge=1, le=3600)
    """How old a webhook signature's timestamp may be."""
    webhook_future_skew_seconds: int = Field(default=300, ge=0, le=3600)
    """How far in the future a webhook signature's timestamp may be, for clock skew."""
    webhook_rejection_audit_seconds: float = Field(default=60.0, ge=1)
    """At most one audit row per webhook rejection reason per this many seconds; the metric counts them
    all."""
    retention_interval_seconds: float = Field(default=6 * 3600, ge=0)
    """How often the retention job deletes old rows."""
    retention_audit_days: int = Field(default=90, ge=1)
    """Audit rows older than this are deleted."""
    retention_stripe_event_days: int = Field(default=30, ge=3)
    """Processed Stripe event ids older than this are deleted; at least 3, since Stripe retries for 3 days."""
    retention_expired_days: int = Field(default=7, ge=1)
    """Expired browser sessions, authorization codes, tokens and elicitations older than this are deleted."""
    retention_batch_rows: int = Field(default=1000, ge=1, le=100_000)
    """Rows the retention job deletes per transaction."""

    gc_freeze: bool = True
    """After start-up, freeze the start-up heap out of the garbage collector's walks (see
    `service/gc_tuning.py`)."""
    gc_gen0_threshold: int = Field(default=10_000, ge=0)
    """After start-up, the garbage collector's gen0 threshold; `0` keeps Python's 700."""
    sync_tool_threads: int = Field(default=40, ge=1, le=1000)
    """Sync tool calls running at once in worker threads; more wait for a thread (see
    `service/tool_threads.py`)."""

    upstream_mcp_url: str | None = None
    """Gateway mode: the upstream MCP server (Streamable HTTP) whose tools are served behind the paywall;
    `https://`, or loopback `http://` in development."""
    upstream_mcp_authorization: SecretStr | None = None
    """Sent upstream as its `Authorization` header, e.g. `Bearer xyz`; our users' tokens never are."""
    upstream_user_header_secret: SecretStr | None = None
    """Signs the `X-Paid-MCP-User` header naming the user on each forwarded call; required in production
    with `UPSTREAM_MCP_URL`."""
    upstream_free_tools: CsvList = []
    """Upstream tools served free; a plan's `tools` makes one paid; any other upstream tool is not served."""
    upstream_timeout_seconds: float = Field(default=60.0, gt=0)
    """Bound on each forwarded call, and on reading the upstream's tools at start-up."""

    password_hash_time_cost: int = Field(default=3, ge=1)
    """argon2id passes for local accounts' passwords (argon2-cffi's RFC 9106 low-memory default);
    production refuses fewer than 2; older hashes are redone at the next sign-in."""
    password_hash_memory_kib: int = Field(default=64 * 1024, ge=8)
    """argon2id memory per hash in KiB; production refuses less than OWASP's 19456."""
    password_hash_parallelism: int = Field(default=4, ge=1)
    """argon2id lanes per hash."""
    password_hash_concurrency: int = Field(default=2, ge=1)
    """Passwords hashed at once per replica, in worker threads; each holds its memory."""
    password_hash_queue: int = Field(default=16, ge=0, le=10_000)
    """Sign-ins waiting for a hashing slot; beyond them a sign-in is answered 503 with `Retry-After`."""

    sign_in_account_failures: int = Field(default=5, ge=1, le=1000)
    """Failed sign-ins (wrong password at `/login`, refused requests at `/token`) after which an account is
    locked out (429 with `Retry-After`), per replica."""
    sign_in_ip_failures: int = Field(default=20, ge=1, le=10_000)
    """Failed sign-ins after which a client address is locked out, per replica."""
    sign_in_lockout_seconds: float = Field(default=30.0, ge=1, le=3600)
    """The first lockout; doubled at each further failure."""
    sign_in_lockout_max_seconds: float = Field(default=900.0, ge=1, le=86_400)
    """The longest lockout."""
    sign_in_failure_memory_seconds: float = Field(default=3600.0, ge=60, le=7 * 86_400)
    """Failures are forgotten after this long without one."""
    sign_in_throttle_entries: int = Field(default=100_000, ge=100, le=10_000_000)
    """Accounts and addresses whose sign-in failures each replica remembers at most."""
    trusted_proxies: CsvList = []
    """Proxies (addresses or CIDR ranges) whose `X-Forwarded-For` names the client; empty: trust none."""

    access_token_ttl_seconds: int = Field(default=3600, gt=0)
    """OAuth access token lifetime."""
    refresh_token_ttl_seconds: int = Field(default=30 * 24 * 3600, gt=0)
    """OAuth refresh token lifetime."""
    authorization_code_ttl_seconds: int = Field(default=300, gt=0)
    """OAuth authorization code lifetime."""
    oauth_registrations_per_address_per_hour: int = Field(default=30, ge=1, le=100_000)
    """Dynamic client registrations one client address may make per hour, on each replica."""
    browser_session_ttl_seconds: int = Field(default=12 * 3600, gt=0)
    """Login cookie lifetime."""
    personal_token_ttl_days: int = Field(default=90, ge=1, le=3650)
    """Lifetime of `tokens create` without `--expires-in-days`; a token that never expires needs
    `--never-expires`."""

    oidc_issuer: str | None = None
    """An external OpenID Connect provider instead of the built-in authorization server; `https://` outside
    development."""
    oidc_audience: str | None = None
    """The `aud` value access tokens must contain; unset: the MCP resource URL."""
    oidc_client_id: str | None = None
    """The payment page's confidential client at the issuer; required with `OIDC_ISSUER`."""
    oidc_client_secret: SecretStr | None = None
    """That client's secret; required with `OIDC_ISSUER`."""
    oidc_introspection: bool = False
    """Check opaque access tokens at the issuer's RFC 7662 endpoint, with the client above, instead of as
    JWTs."""
    oidc_scopes: str = "openid email profile"
    """Scopes the payment page's sign-in asks for."""
    oidc_jwks_min_refresh_seconds: float = Field(default=10.0, ge=0)
    """Least time between JWKS downloads triggered by an unknown key id."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """SECRETS_DIR names a directory of files, one per setting (e.g. a mounted Kubernetes Secret).

        A file is named like the setting's variable (`SECRET_KEY`) and holds its value; the
        environment and `.env` still take precedence over it.
        """
        secrets_dir = os.environ.get("SECRETS_DIR")
        if secrets_dir:
            if not Path(secrets_dir).is_dir():
                raise ConfigurationError(f"SECRETS_DIR={secrets_dir} is not a directory")
            file_secret_settings = SecretsSettingsSource(settings_cls, secrets_dir=secrets_dir)
        return init_settings, env_settings, dotenv_settings, file_secret_settings

    _split = field_validator(
        "mcp_allowed_hosts",
        "mcp_allowed_origins",
        "request_state_keys",
        "stripe_webhook_secret",
        "tool_packages",
        "upstream_free_tools",
        "trusted_proxies",
        mode="before",
    )(_split_csv)

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_are_addresses(cls, value: list[str]) -> list[str]:
        for entry in value:
            try:
                ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(
                    f"TRUSTED_PROXIES entry {entry!r} is not an IP address or CIDR range"
                ) from None
        return value

    @field_validator("public_base_url")
    @classmethod
    def _strip_trailing_slash(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("PUBLIC_BASE_URL must be an absolute http(s) URL")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _json_responses_need_the_error_style(self) -> Settings:
        if self.mcp_json_response and self.elicitation_style == "request":
            raise ConfigurationError(
                "MCP_JSON_RESPONSE=true removes the per-request stream that ELICITATION_STYLE=request needs; "
                "use ELICITATION_STYLE=error with JSON responses"
            )
        return self

    @model_validator(mode="after")
    def _oidc_needs_its_client(self) -> Settings:
        if self.oidc_issuer is not None:
            from service.identity.oidc.config import oidc_setting_problems

            if problems := oidc_setting_problems(self):
                raise ConfigurationError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _upstream_url_is_safe(self) -> Settings:
        if self.upstream_mcp_url:
            problem = upstream_url_problem(self.upstream_mcp_url, development=self.is_development)
            if problem:
                raise ConfigurationError(problem)
        return self

    @model_validator(mode="after")
    def _development_stays_on_loopback(self) -> Settings:
        if problem := listen_problem(self):
            raise ConfigurationError(problem)
        return self

    @model_validator(mode="after")
    def _refuse_unsafe_production(self) -> Settings:
        if self.environment == "development":
            return self
        problems: list[str] = []
        if self.stripe_api_base:
            problems.append("STRIPE_API_BASE is set (production talks to Stripe's own API only)")
        if self.upstream_mcp_url and self.upstream_user_header_secret is None:
            problems.append("UPSTREAM_USER_HEADER_SECRET is required with UPSTREAM_MCP_URL")
        if not self.public_base_url.startswith("https://"):
            problems.append("PUBLIC_BASE_URL must use https:// outside development")
        if (
            self.secret_key.get_secret_value() == DEV_SECRET_KEY
            or len(self.secret_key.get_secret_value()) < 32
        ):
            problems.append("SECRET_KEY is the development default or shorter than 32 characters")
        if DEV_WEBHOOK_SECRET in self.stripe_webhook_secret:
            problems.append("STRIPE_WEBHOOK_SECRET is the development default")
        if DEV_REQUEST_STATE_KEY in self.request_state_keys:
            problems.append("REQUEST_STATE_KEYS is the development default")
        if self.stripe_secret_key.get_secret_value() == SANDBOX_SECRET_KEY:
            problems.append("STRIPE_SECRET_KEY is the built-in sandbox key")
        if self.password_hash_memory_kib < 19 * 1024 or self.password_hash_time_cost < 2:
            problems.append(
                "PASSWORD_HASH_MEMORY_KIB and PASSWORD_HASH_TIME_COST are below OWASP's argon2id minimum "
                "(19456 KiB, 2 passes)"
            )
        if problems:
            raise ConfigurationError(
                "refusing to start with ENVIRONMENT=production: " + "; ".join(problems) + "."
            )
        return self

    @property
    def is_development(self) -> bool:
        return self.environment == "development"

    @property
    def effective_log_format(self) -> Literal["json", "text"]:
        return self.log_format or ("text" if self.is_development else "json")

    @property
    def metrics_served(self) -> bool:
        if self.metrics_enabled is not None:
            return self.metrics_enabled
        return self.is_development or self.metrics_port != 0

    @property
    def uses_stripe_sandbox(self) -> bool:
        """True when no real Stripe key is configured: the service then serves the built-in sandbox."""
        return self.stripe_secret_key.get_secret_value() == SANDBOX_SECRET_KEY

    @property
    def embedded_stripe_sandbox(self) -> bool:
        """Serve the sandbox ourselves: sandbox key and no API base pointing elsewhere."""
        return self.uses_stripe_sandbox and not self.stripe_api_base

    @property
    def internal_base_url(self) -> str:
        """How this process reaches itself over loopback (the embedded sandbox posts webhooks here)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host  # noqa: S104
        return f"http://{host}:{self.port}"

    @property
    def mcp_resource_url(self) -> str:
        return f"{self.public_base_url}/mcp"

    @property
    def oidc_expected_audience(self) -> str:
        return self.oidc_audience or self.mcp_resource_url

    @cached_property
    def transport_allowed_hosts(self) -> list[str]:
        netloc = urlsplit(self.public_base_url).netloc
        hosts = [netloc, *self._loopback_netlocs]
        return list(dict.fromkeys([*hosts, *self.mcp_allowed_hosts]))

    @cached_property
    def transport_allowed_origins(self) -> list[str]:
        """The public origin; in development also this port's loopback origins (local browser tools)."""
        parts = urlsplit(self.public_base_url)
        origins = [f"{parts.scheme}://{parts.netloc}"]
        if self.is_development:
            origins += [f"http://{netloc}" for netloc in self._loopback_netlocs]
        return list(dict.fromkeys([*origins, *self.mcp_allowed_origins]))

    @property
    def _loopback_netlocs(self) -> list[str]:
        return [f"127.0.0.1:{self.port}", f"localhost:{self.port}", f"[::1]:{self.port}"]


def listen_problem(settings: Settings) -> str | None:
    """Why the service must not listen on `settings.host`, or None.

    Development settings carry well-known secrets and serve the Stripe sandbox, so they listen on
    loopback only unless `ALLOW_NON_LOOPBACK_IN_DEVELOPMENT` says otherwise.
    """
    if not settings.is_development or settings.allow_non_loopback_in_development:
        return None
    if is_loopback_host(settings.host):
        return None
    return (
        f"refusing to listen on HOST={settings.host or '(all interfaces)'} with ENVIRONMENT=development: "
        "use a loopback host, ENVIRONMENT=production, or ALLOW_NON_LOOPBACK_IN_DEVELOPMENT=true"
    )
