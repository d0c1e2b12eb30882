"""One settings model per domain; each validates its own fields and is what that domain receives.

A section's fields keep their flat environment variable names as aliases (`StripeSettings.secret_key`
is `STRIPE_SECRET_KEY`); a section accepts either spelling when built directly.
"""

from __future__ import annotations

from collections.abc import Callable
from ipaddress import ip_network
from pathlib import Path
from typing import Annotated, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from service.settings.checks import (
    DEFAULT_PLANS_FILE,
    oidc_issuer_problem,
    upstream_url_problem,
)

DEV_SECRET_KEY = "dev-only-secret-key-change-me"  # noqa: S105 - the refused-outside-development default
DEV_WEBHOOK_SECRET = "whsec_dev_sandbox_secret"  # noqa: S105
DEV_REQUEST_STATE_KEY = "ZGV2LW9ubHktcmVxdWVzdC1zdGF0ZS1rZXktMzJieXQ="
SANDBOX_SECRET_KEY = "sk_test_sandbox"  # noqa: S105 - the key the built-in sandbox accepts


class ConfigurationError(Exception):
    """The settings are unsafe for the chosen environment; the message says what to change."""


# What the SDK's request-state sealing requires of each key.
MIN_REQUEST_STATE_KEY_BYTES = 32


def _split_csv(value: object) -> object:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


CsvList = Annotated[list[str], NoDecode]


def _prefixed(prefix: str) -> Callable[[str], str]:
    def alias(name: str) -> str:
        return prefix + name

    return alias


def section_config(prefix: str = "") -> ConfigDict:
    """A frozen section whose fields are read from `PREFIX` + field name unless they name their own alias."""
    return ConfigDict(
        frozen=True,
        extra="forbid",
        validate_default=True,
        use_attribute_docstrings=True,
        alias_generator=_prefixed(prefix),
        validate_by_name=True,
        validate_by_alias=True,
    )


class Section(BaseModel):
    """A domain's settings; `title` heads its part of docs/configuration.md."""

    title: ClassVar[str]


# The widest range TRUSTED_PROXIES accepts per IP version: a private /8 or a CDN's published ranges
# fit, "everyone" (0.0.0.0/0, ::/0) and its near relatives do not.
WIDEST_PROXY_PREFIX = {4: 8, 6: 16}


class HttpSettings(Section):
    model_config = section_config()
    title: ClassVar[str] = "HTTP service"

    host: str = "127.0.0.1"
    """The address `serve` listens on."""
    allow_non_loopback_in_development: bool = False
    """Let development settings listen beyond loopback; their well-known secrets and the sandbox are only
    safe there."""
    port: int = Field(default=8000, ge=1, le=65535)
    """The port `serve` listens on."""
    public_base_url: str = "http://127.0.0.1:8000"
    """The URL users and clients reach; the issuer, the MCP resource and payment links derive from it."""
    secret_key: SecretStr = SecretStr(DEV_SECRET_KEY)
    """Signs login requests and CSRF tokens; 32 characters or more in production."""
    trusted_proxies: CsvList = []
    """Proxies (addresses or CIDR ranges, none wider than /8 for IPv4 or /16 for IPv6) whose
    `X-Forwarded-For` names the client; empty: trust none."""
    max_request_body_bytes: int = Field(default=1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    """Largest request body accepted on any route, `/mcp` and pages included; a larger one is answered 413."""
    max_webhook_body_bytes: int = Field(default=512 * 1024, ge=1024, le=64 * 1024 * 1024)
    """Largest `POST /webhooks/stripe` body accepted; a larger one is answered 413."""
    max_json_depth: int = Field(default=64, ge=4, le=512)
    """Deepest nesting of objects and arrays accepted in `/mcp` and webhook JSON."""

    _split = field_validator("trusted_proxies", mode="before")(_split_csv)

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_are_addresses(cls, value: list[str]) -> list[str]:
        for entry in value:
            try:
                network = ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(
                    f"TRUSTED_PROXIES entry {entry!r} is not an IP address or CIDR range"
                ) from None
            widest = WIDEST_PROXY_PREFIX[network.version]
            if network.prefixlen < widest:
                # Every per-address limit trusts the forwarded address: a range this wide lets a
                # large part of the internet name any client it likes.
                raise ValueError(
                    f"TRUSTED_PROXIES entry {entry!r} is wider than /{widest}: name the proxies' own "
                    "addresses or ranges"
                )
        return value

    @field_validator("public_base_url")
    @classmethod
    def _strip_trailing_slash(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("PUBLIC_BASE_URL must be an absolute http(s) URL")
        return value.rstrip("/")

    @property
    def internal_base_url(self) -> str:
        """How this process reaches itself over loopback (the embedded sandbox posts webhooks here)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host  # noqa: S104
        return f"http://{host}:{self.port}"

    @property
    def mcp_resource_url(self) -> str:
        return f"{self.public_base_url}/mcp"

    @property
    def loopback_netlocs(self) -> list[str]:
        return [f"127.0.0.1:{self.port}", f"localhost:{self.port}", f"[::1]:{self.port}"]


class DatabaseSettings(Section):
    model_config = section_config("database_")
    title: ClassVar[str] = "Database"

    url: str = "sqlite:///./var/service.db"
    """`sqlite:///path` or `postgresql://user:pass@host:port/db`."""
    sqlite_synchronous: Literal["full", "normal"] = Field(default="normal", alias="sqlite_synchronous")
    """SQLite's `synchronous` (the database is always in WAL mode): `normal` keeps every commit through a
    crash of the process and may lose the latest ones to a power loss or OS crash; `full` syncs the log
    at every commit. See docs/adr/0006-sqlite-synchronous-normal.md."""
    lock_timeout_seconds: float = Field(default=5.0, ge=0.01, le=600)
    """The longest a statement waits for a lock another transaction holds (a row, or SQLite's write
    lock) before it fails: a stuck transaction then fails the calls behind it (a paid call does not
    run) instead of holding their connections until it ends. Migrations have their own
    (`DATABASE_MIGRATION_LOCK_TIMEOUT_SECONDS`)."""
    migration_lock_timeout_seconds: float = Field(default=10.0, ge=0.01, le=3600)
    """PostgreSQL only: the longest a migration's statement waits for a lock. A schema change
    waiting behind a running transaction holds up every query on its table meanwhile, so it gives
    up instead: `migrate` fails with nothing changed, and runs again (the Job retries it)."""
    idle_in_transaction_timeout_seconds: float = Field(default=60.0, ge=0, le=86_400)
    """PostgreSQL only: a session left inside a transaction doing nothing for this long is ended by
    the server, its locks released (the service never keeps one open across a wait; this catches a
    stuck or forgotten one). `0`: no limit. Migrations are not bounded by it."""
    statement_timeout_seconds: float = Field(default=30.0, ge=0, le=86_400)
    """PostgreSQL only: a statement still running after this long is cancelled, so one gone wrong
    (a bad plan on a grown table) cannot hold its connection indefinitely. The service's own
    statements take milliseconds. `0`: no limit. Migrations are not bounded by it."""
    completion_bus: Literal["auto", "local"] = Field(default="auto", alias="completion_bus")
    """`auto`: LISTEN/NOTIFY on PostgreSQL; `local` skips it (e.g. behind PgBouncer in transaction mode)
    and the sweep still delivers."""
    readiness_outage_grace_seconds: float = Field(
        default=30.0, ge=0, le=600, alias="readiness_outage_grace_seconds"
    )
    """How long `/readyz` keeps answering ready while a database it reached before does not answer; `0`:
    unready at once."""
    readiness_cache_seconds: float = Field(default=1.0, ge=0, le=10, alias="readiness_cache_seconds")
    """How long `/readyz` reuses its last check, so a flood of probes (the route is public) costs one
    database check per this many seconds; probes arriving during a check share it. `0`: no reuse."""


class ObservabilitySettings(Section):
    model_config = section_config()
    title: ClassVar[str] = "Logs, metrics and tracing"

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


class McpSettings(Section):
    model_config = section_config("mcp_")
    title: ClassVar[str] = "MCP transport"

    server_name: str = "paid-mcp-service"
    """The MCP server name; also the audience of sealed `request_state`, so the same on every replica."""
    allowed_hosts: CsvList = []
    """Extra `Host` values accepted on `/mcp`; the public host and loopback always are."""
    allowed_origins: CsvList = []
    """Extra `Origin` values accepted on `/mcp`; the public origin always is, and loopback in development."""
    request_state_keys: CsvList = Field(default=[DEV_REQUEST_STATE_KEY], alias="request_state_keys")
    """Keys sealing 2026-07-28 `request_state`, newest first: the first seals, all open; the same on every
    replica."""
    json_response: bool = False
    """Answer 2025-11-25 requests as JSON instead of SSE; needs `ELICITATION_STYLE=error`."""
    sdk_workarounds: bool = True
    """Apply the measured workarounds of the `mcp` SDK's per-call defaults (`service/compat/mcp.py`,
    ADR 0005), each also off on an SDK version it was not checked on; false keeps every SDK default."""
    otel_spans: bool = False
    """Keep the SDK's OpenTelemetry span per MCP message; useful only with an exporter installed
    (`OTEL_EXPORTER_OTLP_ENDPOINT` with the `otel` extra, or one around the service)."""
    resumable_streams: bool = False
    """Let a 2025-11-25 client resume a POST's SSE stream it lost (SEP-1699): each stream opens with
    a priming event (an id and a `retry:` hint) and its messages are kept, bounded, in this
    replica's memory, so a reconnect with `Last-Event-ID` gets what it missed. Only the replica
    holding the session can resume it (session affinity). Off by default: it adds CPU to every
    2025-11-25 SSE tool call (docs/operations.md). Ignored with `MCP_JSON_RESPONSE=true`, which has
    no streams."""
    resumable_events_per_stream: int = Field(default=32, ge=2, le=10_000)
    """Messages kept per stream (a tool call's progress, elicitations and its result); older ones go
    first, and a client that missed one of those cannot resume."""
    resumable_streams_per_session: int = Field(default=16, ge=1, le=10_000)
    """Streams kept per session; the oldest goes first."""
    resumable_seconds: float = Field(default=300.0, ge=1, le=24 * 3600)
    """How long a kept message can be replayed."""
    resumable_max_bytes: int = Field(default=32 * 1024 * 1024, ge=64 * 1024, le=16 * 1024**3)
    """Memory all kept messages of this replica may use (their JSON plus a per-message overhead);
    beyond it the oldest streams go first."""
    sse_retry_ms: int = Field(default=1000, ge=0, le=600_000)
    """The `retry:` an SSE priming event carries: how long a client waits before reconnecting."""
    session_idle_seconds: float = Field(default=1800.0, ge=1, le=7 * 24 * 3600)
    """A 2025-11-25 session with no request in flight for this long is closed (the SDK's idle timeout)."""
    max_legacy_sessions_per_user: int = Field(
        default=10, ge=1, le=100_000, alias="max_legacy_sessions_per_user"
    )
    """Open 2025-11-25 sessions per user (the SDK's own cap is for the whole process); also how many
    sessions one elicitation keeps owed its completion notice."""
    max_requests_in_flight_per_user: int = Field(
        default=128, ge=1, le=100_000, alias="max_mcp_requests_in_flight_per_user"
    )
    """`POST /mcp` requests one user may have under way at once on a replica (tool calls, calls
    waiting for a payment, any other request); beyond them, 429 with `Retry-After`. A 2025-11-25 call
    counts until its handling ends, even after its client hangs up."""

    _split = field_validator("allowed_hosts", "allowed_origins", "request_state_keys", mode="before")(
        _split_csv
    )

    @field_validator("request_state_keys")
    @classmethod
    def _strong_keys(cls, keys: list[str]) -> list[str]:
        # The SDK refuses these too, but only once the app starts, with a traceback.
        if not keys:
            raise ValueError("REQUEST_STATE_KEYS needs at least one key")
        for number, key in enumerate(keys, start=1):
            if len(key.encode()) < MIN_REQUEST_STATE_KEY_BYTES:
                raise ValueError(
                    f"REQUEST_STATE_KEYS key {number} is shorter than {MIN_REQUEST_STATE_KEY_BYTES} bytes "
                    '(make one with: python -c "import secrets; print(secrets.token_hex(32))")'
                )
        return keys


def key_is_live(secret_key: str) -> bool:
    """Whether a Stripe API key acts in live mode (`sk_live_`, `rk_live_`); anything else is test."""
    return secret_key.startswith(("sk_live_", "rk_live_"))


class StripeSettings(Section):
    model_config = section_config("stripe_")
    title: ClassVar[str] = "Stripe"

    secret_key: SecretStr = SecretStr(SANDBOX_SECRET_KEY)
    """Stripe's secret API key; the default is the built-in sandbox's, which production refuses."""
    webhook_secrets: CsvList = Field(default=[DEV_WEBHOOK_SECRET], alias="stripe_webhook_secret")
    """Webhook signing secrets: the first signs (sandbox), all verify, for rotation."""
    api_base: str | None = None
    """Another Stripe API base URL, e.g. a sandbox run separately; refused in production."""
    webhook_tolerance_seconds: int = Field(default=300, ge=1, le=3600, alias="webhook_tolerance_seconds")
    """How old a webhook signature's timestamp may be."""
    webhook_future_skew_seconds: int = Field(default=300, ge=0, le=3600, alias="webhook_future_skew_seconds")
    """How far in the future a webhook signature's timestamp may be, for clock skew."""
    webhook_rejection_audit_seconds: float = Field(
        default=60.0, ge=1, alias="webhook_rejection_audit_seconds"
    )
    """At most one audit row per webhook rejection reason per this many seconds; the metric counts them
    all."""

    allow_test_mode: bool = False
    """Let `ENVIRONMENT=production` run on a Stripe test-mode key (a staging deployment): Stripe's
    test cards then unlock paid tools, so never where real users are."""

    _split = field_validator("webhook_secrets", mode="before")(_split_csv)

    @property
    def is_live(self) -> bool:
        """Whether the secret key acts in Stripe's live mode."""
        return key_is_live(self.secret_key.get_secret_value())

    @property
    def uses_sandbox(self) -> bool:
        """True when no real Stripe key is configured: the service then serves the built-in sandbox."""
        return self.secret_key.get_secret_value() == SANDBOX_SECRET_KEY

    @property
    def embedded_sandbox(self) -> bool:
        """Serve the sandbox ourselves: sandbox key and no API base pointing elsewhere."""
        return self.uses_sandbox and not self.api_base


class StripeSandboxSettings(Section):
    model_config = section_config("stripe_sandbox_")
    title: ClassVar[str] = "Built-in Stripe sandbox"

    port: int = Field(default=8001, ge=0, le=65535)
    """Loopback port of the built-in Stripe sandbox; `0` picks any free port."""
    state_file: Path | None = Path("var/stripe-sandbox.json")
    """Where the built-in Stripe sandbox keeps its objects between runs."""
    adversarial: bool = False
    """The sandbox delivers webhooks late, out of order and twice, as Stripe may."""
    webhook_retry_schedule: Literal["compressed", "stripe"] = "compressed"
    """How the sandbox retries a webhook its endpoint did not accept: `compressed`, Stripe's shape
    within about 15 minutes; `stripe`, Stripe's own schedule over 3 days."""
    webhook_ordered: bool = False
    """Deliver the sandbox's webhooks in the order they were emitted (Stripe's order varies, and so
    does the sandbox's by default)."""
    rate_limit: bool = False
    """The sandbox answers 429 past Stripe test mode's rate limit (25 requests a second), so that
    retry code gets exercised."""


class BillingSettings(Section):
    model_config = section_config()
    title: ClassVar[str] = "Plans, usage and reconciliation"

    plans_file: Path = DEFAULT_PLANS_FILE
    """The plan catalog (TOML); the default is the built-in `default_plans.toml`."""
    max_portal_sessions_per_user_per_hour: int = Field(default=10, ge=1, le=10_000)
    """Billing portal sessions `POST /billing` may create for one user in an hour, counted before any
    Stripe call; beyond them, 429."""
    past_due_grace_seconds: int = Field(default=3 * 24 * 3600, ge=0)
    """Access kept while a subscription is `past_due`."""
    entitlement_cache_seconds: float = Field(default=30.0, ge=0)
    """Lifetime of the in-process entitlement cache; webhooks invalidate it sooner."""
    usage_report_interval_seconds: float = Field(default=60.0, ge=0, le=86400)
    """How often each replica tries to send recorded metered calls to Stripe as meter events, one
    replica at a time (a failed event is retried with backoff); `0`: never."""
    usage_report_settle_seconds: float = Field(default=300.0, ge=0, le=1800)
    """A metered call is sent to Stripe no sooner than this after it was let run, so that a call that
    fails or is cancelled meanwhile is given back and never billed. Stripe takes usage for a period
    until its invoice is finalized, an hour after the period ends: keep this well under that."""
    reconcile_interval_seconds: float = Field(default=600.0, ge=0)
    """How often each replica tries to reconcile with Stripe, one replica at a time; `0`: never."""
    reconcile_lookback_days: int = Field(default=3, ge=1, le=30)
    """How far back reconciliation reads Checkout Sessions and refund and dispute events (Stripe
    lists events of the last 30 days)."""
    reconcile_steps_per_second: float = Field(default=5.0, ge=0)
    """Reconciliation's pace in checkouts, missed events or customers a second, one to three Stripe
    reads each, shared with webhook handling's reads (Stripe allows 25 a second in test mode, 100
    live); `0`: unpaced."""


class ToolSettings(Section):
    model_config = section_config("tool_")
    title: ClassVar[str] = "Tools"

    packages: CsvList = ["service.example_tools:tools"]
    """Tool packages to serve, `module:attribute` each."""
    entry_points: bool = False
    """Also load the `paid_mcp.tools` entry points of installed distributions; off, only `TOOL_PACKAGES`."""
    max_output_bytes: int = Field(
        default=256 * 1024, ge=1024, le=64 * 1024 * 1024, alias="max_tool_output_bytes"
    )
    """Largest tool result, measured as the JSON sent (content, structured content, `_meta` and all);
    a larger one is replaced by a tool error giving its size."""

    _split = field_validator("packages", mode="before")(_split_csv)


class PaywallSettings(Section):
    model_config = section_config()
    title: ClassVar[str] = "Payment flow"

    elicitation_style: Literal["error", "request"] = "error"
    """For 2025-11-25 clients: `error` answers `-32042` with the payment link; `request` sends
    `elicitation/create` and waits."""
    elicitation_ttl_seconds: int = Field(default=24 * 3600, ge=60)
    """How long a payment link stays valid."""
    payment_wait_seconds: float = Field(default=600.0, gt=0)
    """How long an `elicitation/create` call waits, in all, for the client's answer and then the
    payment; a call still waiting then is told its payment is not confirmed yet."""
    retry_wait_seconds: float = Field(default=25.0, ge=0)
    """How long a 2026-07-28 retry waits for the payment before asking again."""
    max_payment_waits_per_user: int = Field(default=4, ge=1, le=1000)
    """Calls of one user waiting for a payment at once (2026-07-28 retries and `elicitation/create`
    calls, from the moment they ask); a call beyond them is answered at once as if nothing was paid
    yet."""
    max_elicitations_per_hour: int = Field(default=20, ge=1)
    """Payment links one user may be sent in an hour."""
    payment_link_cache_seconds: float = Field(default=30.0, ge=0, le=3600)
    """How long a caller's open payment link is remembered, so repeated unpaid calls skip the database."""
    max_checkouts_per_hour: int = Field(default=10, ge=1)
    """Stripe Checkout Sessions one user may create in an hour."""
    max_pay_attempts_per_user_per_hour: int = Field(default=30, ge=1, le=10_000)
    """Presses of the pay button by one user in an hour, counted before any Stripe call; beyond them, 429."""
    max_pay_attempts_per_elicitation_per_hour: int = Field(default=10, ge=1, le=10_000)
    """Presses of the pay button for one payment link in an hour; beyond them, 429."""
    page_audit_seconds: float = Field(default=60.0, ge=1, le=3600)
    """At most one audit row per user, payment link and kind (page opened, another account's link,
    refused pay presses) per this many seconds, on each replica, and per user for refused billing
    portal presses; each row counts the events it stands for."""
    completion_sweep_seconds: float = Field(default=5.0, ge=0)
    """How often each replica looks for completion notices it still owes."""


class RetentionSettings(Section):
    model_config = section_config("retention_")
    title: ClassVar[str] = "Retention"

    interval_seconds: float = Field(default=6 * 3600, ge=0)
    """How often the retention job deletes old rows."""
    audit_days: int = Field(default=90, ge=1)
    """Audit rows older than this are deleted."""
    stripe_event_days: int = Field(default=30, ge=3)
    """Processed Stripe event ids older than this are deleted; at least 3, since Stripe retries for 3 days."""
    expired_days: int = Field(default=7, ge=1)
    """Expired browser sessions, authorization codes, tokens and elicitations older than this are deleted."""
    unused_client_days: int = Field(default=7, ge=1, le=3650)
    """Dynamically registered OAuth clients never used (no consent, authorization code or token) are
    deleted this long after they registered."""
    batch_rows: int = Field(default=1000, ge=1, le=100_000)
    """Rows the retention job deletes per transaction."""


class TuningSettings(Section):
    model_config = section_config()
    title: ClassVar[str] = "Runtime tuning"

    gc_freeze: bool = True
    """After start-up, freeze the start-up heap out of the garbage collector's walks (see
    `service/gc_tuning.py`)."""
    gc_gen0_threshold: int = Field(default=10_000, ge=0)
    """After start-up, the garbage collector's gen0 threshold; `0` keeps Python's 700."""
    anyio_workarounds: bool = True
    """Apply the measured workaround for anyio's cancelled-task reference cycle in `serve`
    (`service/compat/anyio.py`, ADR 0009), also off on an anyio version it was not checked on;
    false leaves the event loop's tasks as asyncio makes them."""
    sync_tool_threads: int = Field(default=40, ge=1, le=1000)
    """Sync tool calls running at once in worker threads; more wait for a thread (see
    `service/tool_threads.py`)."""
    sync_tool_threads_per_user: int = Field(default=20, ge=1, le=1000)
    """Of those, the most one user's calls hold at once; their further sync calls wait for one of
    their own to end, so one user's slow calls leave threads for others (at most
    `SYNC_TOOL_THREADS`)."""


class GatewaySettings(Section):
    model_config = section_config("upstream_")
    title: ClassVar[str] = "Gateway mode"

    url: str | None = Field(default=None, alias="upstream_mcp_url")
    """Gateway mode: the upstream MCP server (Streamable HTTP) whose tools are served behind the paywall;
    `https://`, or loopback `http://` in development."""
    authorization: SecretStr | None = Field(default=None, alias="upstream_mcp_authorization")
    """Sent upstream as its `Authorization` header, e.g. `Bearer xyz`; our users' tokens never are."""
    user_header_secret: SecretStr | None = None
    """Signs the `X-Paid-MCP-User` header naming the user on each forwarded call; required in production
    with `UPSTREAM_MCP_URL`."""
    free_tools: CsvList = []
    """Upstream tools served free; a plan's `tools` makes one paid; any other upstream tool is not served."""
    timeout_seconds: float = Field(default=60.0, gt=0)
    """Bound on each forwarded call, and on reading the upstream's tools at start-up (there at least
    10 s, so that a bound meant for fast calls does not stop a replica from starting)."""
    max_response_bytes: int = Field(default=4 * 1024 * 1024, ge=64 * 1024, le=256 * 1024 * 1024)
    """Most bytes read of one upstream answer (a JSON body, or an SSE stream with its progress
    notifications); a call whose answer goes past it ends with a tool error. At least
    `MAX_TOOL_OUTPUT_BYTES`."""

    _split = field_validator("free_tools", mode="before")(_split_csv)

    @model_validator(mode="after")
    def _url_is_safe_somewhere(self) -> GatewaySettings:
        # Development is the laxer environment; production's stricter rule is checked on `Settings`.
        if self.url and (problem := upstream_url_problem(self.url, development=True)):
            raise ConfigurationError(problem)
        return self


class PasswordHashingSettings(Section):
    model_config = section_config("password_hash_")
    title: ClassVar[str] = "Password hashing"

    time_cost: int = Field(default=3, ge=1)
    """argon2id passes for local accounts' passwords (argon2-cffi's RFC 9106 low-memory default);
    production refuses fewer than 2; older hashes are redone at the next sign-in."""
    memory_kib: int = Field(default=64 * 1024, ge=8)
    """argon2id memory per hash in KiB; production refuses less than OWASP's 19456."""
    parallelism: int = Field(default=4, ge=1)
    """argon2id lanes per hash."""
    concurrency: int = Field(default=2, ge=1)
    """Passwords hashed at once per replica, in worker threads; each holds its memory."""
    queue: int = Field(default=16, ge=0, le=10_000)
    """Sign-ins waiting for a hashing slot; beyond them a sign-in is answered 503 with `Retry-After`."""

    @property
    def meets_owasp_minimum(self) -> bool:
        return self.memory_kib >= 19 * 1024 and self.time_cost >= 2


class SignInSettings(Section):
    model_config = section_config("sign_in_")
    title: ClassVar[str] = "Sign-in throttling"

    account_failures: int = Field(default=5, ge=1, le=1000)
    """Failed sign-ins (wrong password at `/login`) after which an account is locked out (429 with
    `Retry-After`) for browsers without its known-device cookie; a browser with one has an allowance of
    its own. Per replica; attempts under way count too."""
    ip_failures: int = Field(default=20, ge=1, le=10_000)
    """Failed sign-ins (at `/login`, refused requests at `/token`) after which a client address is locked
    out, per replica; attempts under way count too."""
    lockout_seconds: float = Field(default=30.0, ge=1, le=3600)
    """The first lockout; doubled at each further failure."""
    lockout_max_seconds: float = Field(default=900.0, ge=1, le=86_400)
    """The longest lockout."""
    failure_memory_seconds: float = Field(default=3600.0, ge=60, le=7 * 86_400)
    """Failures are forgotten after this long without one."""
    throttle_entries: int = Field(default=100_000, ge=100, le=10_000_000)
    """Accounts, known devices and addresses whose sign-in failures (and attempts under way) each
    replica remembers at most."""
    known_device_days: int = Field(default=60, ge=1, le=365)
    """Lifetime of the known-device cookie a successful sign-in sets; with it, a browser's sign-ins
    are throttled per (account, browser) and not locked out by others' failures at that account."""


class IdentitySettings(Section):
    model_config = section_config()
    title: ClassVar[str] = "Tokens and browser sessions"

    access_token_ttl_seconds: int = Field(default=3600, gt=0)
    """OAuth access token lifetime."""
    refresh_token_ttl_seconds: int = Field(default=30 * 24 * 3600, gt=0)
    """OAuth refresh token lifetime."""
    authorization_code_ttl_seconds: int = Field(default=300, gt=0)
    """OAuth authorization code lifetime."""
    oauth_registrations_per_address_per_hour: int = Field(default=30, ge=1, le=100_000)
    """Dynamic client registrations one client address may make per hour, on each replica."""
    oauth_registrations_per_hour: int = Field(default=1000, ge=1, le=100_000)
    """Dynamic client registrations all addresses together may make per hour, counted in the database
    so it holds across replicas; beyond it, 429 with `Retry-After`."""
    browser_session_ttl_seconds: int = Field(default=12 * 3600, gt=0)
    """Login cookie lifetime."""
    max_browser_sessions_per_user: int = Field(default=20, ge=1, le=1000)
    """Live browser sessions one user may have; signing in past this ends the oldest."""
    personal_token_ttl_days: int = Field(default=90, ge=1, le=3650)
    """Lifetime of `tokens create` without `--expires-in-days`; a token that never expires needs
    `--never-expires`."""
    token_cache_seconds: float = Field(default=30.0, ge=0)
    """How long a verified bearer token is remembered in process; it bounds how long a token revoked
    elsewhere keeps working."""


class OidcSettings(Section):
    model_config = section_config("oidc_")
    title: ClassVar[str] = "External OpenID Connect provider"

    issuer: str | None = None
    """An external OpenID Connect provider instead of the built-in authorization server; `https://` outside
    development."""
    audience: str | None = None
    """The `aud` value access tokens must contain; unset: the MCP resource URL."""
    client_id: str | None = None
    """The payment page's confidential client at the issuer; required with `OIDC_ISSUER`."""
    client_secret: SecretStr | None = None
    """That client's secret; required with `OIDC_ISSUER`."""
    introspection: bool = False
    """Check opaque access tokens at the issuer's RFC 7662 endpoint, with the client above, instead of as
    JWTs."""
    scopes: str = "openid email profile"
    """Scopes the payment page's sign-in asks for."""
    jwks_min_refresh_seconds: float = Field(default=10.0, ge=0)
    """Least time between JWKS downloads triggered by an unknown key id."""
    callbacks_per_address_per_hour: int = Field(default=30, ge=1, le=100_000)
    """Sign-in answers at `/oidc/callback` one client address may have redeemed at the issuer per hour
    (each is a token request with our client's secret), on each replica; past it `429`."""
    introspection_refusal_seconds: float = Field(default=30.0, ge=1, le=3600)
    """With `OIDC_INTROSPECTION`: how long a token the issuer refused is refused again without asking
    it, on each replica (up to 10,000 tokens, by digest)."""
    introspections_per_address_per_minute: int = Field(default=30, ge=1, le=100_000)
    """With `OIDC_INTROSPECTION`: introspections of not-yet-known tokens one client address may cause
    per minute (each is a request with our client's secret), on each replica; past it `429`."""
    introspections_in_flight: int = Field(default=32, ge=1, le=10_000)
    """With `OIDC_INTROSPECTION`: introspections waiting on the issuer at once, on each replica; past
    it a not-yet-known token is answered `503` at once."""

    @model_validator(mode="after")
    def _issuer_needs_its_client(self) -> OidcSettings:
        if self.issuer is None:
            return self
        problems: list[str] = []
        # Development is the laxer environment; production's stricter rule is checked on `Settings`.
        if problem := oidc_issuer_problem(self.issuer, development=True):
            problems.append(problem)
        if not self.client_id:
            problems.append(
                "OIDC_CLIENT_ID is required with OIDC_ISSUER (the payment page signs users in with it)"
            )
        if self.client_secret is None or not self.client_secret.get_secret_value():
            problems.append("OIDC_CLIENT_SECRET is required with OIDC_ISSUER")
        if "openid" not in self.scopes.split():
            problems.append("OIDC_SCOPES must include openid")
        if problems:
            raise ConfigurationError("; ".join(problems))
        return self

    def expected_audience(self, resource_url: str) -> str:
        """The `aud` access tokens must carry: the configured audience, else the MCP resource URL."""
        return self.audience or resource_url
