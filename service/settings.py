"""The one configuration object, read from the environment (and an optional `.env` file).

Every default is an embedded-development default: SQLite in `./var`, the built-in Stripe sandbox,
well-known development secrets. Outside development mode those defaults are refused at start-up,
so a production deployment cannot run on a secret that is printed in this file.
"""

from __future__ import annotations

import os
from functools import cached_property
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
        env_file=".env", env_file_encoding="utf-8", extra="ignore", frozen=True, validate_default=True
    )

    environment: Literal["development", "production"] = "development"
    host: str = "127.0.0.1"
    # Development defaults (well-known secrets, the sandbox) are only safe on loopback; a container
    # that sets HOST=0.0.0.0 must run production or opt out here explicitly.
    allow_non_loopback_in_development: bool = False
    port: int = Field(default=8000, ge=1, le=65535)
    public_base_url: str = "http://127.0.0.1:8000"
    database_url: str = "sqlite:///./var/service.db"
    secret_key: SecretStr = SecretStr(DEV_SECRET_KEY)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["json", "text"] | None = None  # None: text in development, JSON otherwise
    # /metrics: on in development; in production only if asked for. METRICS_PORT=0 serves it on the
    # main app, any other port on a listener of its own (keep that port out of the Service/Ingress).
    metrics_enabled: bool | None = None  # None: development, or METRICS_PORT set
    metrics_port: int = Field(default=0, ge=0, le=65535)

    mcp_server_name: str = "paid-mcp-service"
    mcp_allowed_hosts: CsvList = []
    mcp_allowed_origins: CsvList = []
    request_state_keys: CsvList = [DEV_REQUEST_STATE_KEY]

    stripe_secret_key: SecretStr = SecretStr(SANDBOX_SECRET_KEY)
    stripe_webhook_secret: CsvList = [DEV_WEBHOOK_SECRET]
    stripe_api_base: str | None = None
    stripe_sandbox_port: int = Field(default=8001, ge=0, le=65535)
    stripe_sandbox_state_file: Path | None = Path("var/stripe-sandbox.json")
    stripe_sandbox_adversarial: bool = False
    # The sandbox's webhook retries: Stripe's shape within minutes, or Stripe's own days.
    stripe_sandbox_webhook_retry_schedule: Literal["compressed", "stripe"] = "compressed"
    # Deliver the sandbox's webhooks in emission order (Stripe's order varies).
    stripe_sandbox_webhook_ordered: bool = False
    # Answer 429 past test mode's rate limit (25 requests a second), to exercise retry code.
    stripe_sandbox_rate_limit: bool = False

    plans_file: Path = DEFAULT_PLANS_FILE
    # Tool packages, `module:attribute` each; installed packages may also advertise `paid_mcp.tools`.
    tool_packages: CsvList = ["service.example_tools:tools"]
    # Also load the `paid_mcp.tools` entry points of installed distributions (off: only TOOL_PACKAGES).
    tool_entry_points: bool = False
    elicitation_style: Literal["error", "request"] = "error"
    elicitation_ttl_seconds: int = Field(default=24 * 3600, ge=60)
    payment_wait_seconds: float = Field(default=600.0, gt=0)
    retry_wait_seconds: float = Field(default=25.0, ge=0)
    past_due_grace_seconds: int = Field(default=3 * 24 * 3600, ge=0)
    entitlement_cache_seconds: float = Field(default=30.0, ge=0)
    token_cache_seconds: float = Field(default=30.0, ge=0)
    mcp_json_response: bool = False
    # The SDK's OpenTelemetry span per MCP message; useful only with an exporter installed around
    # the service (the service installs none).
    mcp_otel_spans: bool = False
    max_elicitations_per_hour: int = Field(default=20, ge=1)
    max_checkouts_per_hour: int = Field(default=10, ge=1)
    # Presses of the pay button in an hour, counted before any Stripe call; beyond them, 429.
    max_pay_attempts_per_user_per_hour: int = Field(default=30, ge=1, le=10_000)
    max_pay_attempts_per_elicitation_per_hour: int = Field(default=10, ge=1, le=10_000)
    reconcile_interval_seconds: float = Field(default=600.0, ge=0)
    completion_sweep_seconds: float = Field(default=5.0, ge=0)
    # How long /readyz keeps answering ready while a database it reached before does not answer.
    readiness_outage_grace_seconds: float = Field(default=30.0, ge=0, le=600)
    # "local" skips LISTEN/NOTIFY (e.g. behind PgBouncer in transaction mode); the sweep still delivers.
    completion_bus: Literal["auto", "local"] = "auto"
    reconcile_lookback_days: int = Field(default=3, ge=1, le=30)
    # Each step is a checkout or a customer: one to three Stripe reads and a transaction. Stripe
    # allows 25 reads a second in test mode (100 live), shared with webhook handling's own reads.
    reconcile_steps_per_second: float = Field(default=5.0, ge=0)

    # Input and output bounds (docs/security.md, "Input bounds and retention").
    max_request_body_bytes: int = Field(default=1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    max_webhook_body_bytes: int = Field(default=512 * 1024, ge=1024, le=64 * 1024 * 1024)
    max_json_depth: int = Field(default=64, ge=4, le=512)
    max_tool_output_bytes: int = Field(default=256 * 1024, ge=1024, le=64 * 1024 * 1024)
    # How old (and, for clock skew, how far in the future) a webhook signature's timestamp may be.
    webhook_tolerance_seconds: int = Field(default=300, ge=1, le=3600)
    webhook_future_skew_seconds: int = Field(default=300, ge=0, le=3600)
    # At most one audit row per rejection reason per this many seconds; the metric counts them all.
    webhook_rejection_audit_seconds: float = Field(default=60.0, ge=1)
    # Retention: rows older than these are deleted by a job run every RETENTION_INTERVAL_SECONDS.
    retention_interval_seconds: float = Field(default=6 * 3600, ge=0)
    retention_audit_days: int = Field(default=90, ge=1)
    retention_stripe_event_days: int = Field(default=30, ge=3)  # Stripe retries for 3 days
    retention_expired_days: int = Field(default=7, ge=1)  # sessions, codes, tokens, elicitations
    retention_batch_rows: int = Field(default=1000, ge=1, le=100_000)

    # After start-up: freeze the start-up heap out of the collector's walks, raise gen0's threshold
    # (0 keeps Python's 700). See service/gc_tuning.py for the measurements.
    gc_freeze: bool = True
    gc_gen0_threshold: int = Field(default=10_000, ge=0)
    # Rebuild anyio's TaskGroup._spawn so a cancelled child task leaves no reference cycle (every
    # legacy SSE tool call cancels two). See service/anyio_cycle_fix.py.
    anyio_cycle_fix: bool = True
    # Wake the thread a sync tool runs in on the event loop's CPU when no other tool call is in a
    # thread: waking an idle vCPU costs ~300 us on cloud VMs. See service/tool_threads.py.
    tool_threads_follow_loop_cpu: bool = True
    # The same for SQLite's connection thread, which runs every statement. See service/db/engine.py.
    sqlite_thread_follows_loop_cpu: bool = True

    # Gateway mode (service/gateway): serve an upstream MCP server's tools behind the paywall.
    upstream_mcp_url: str | None = None
    upstream_mcp_authorization: SecretStr | None = None  # sent upstream as `Authorization`
    upstream_user_header_secret: SecretStr | None = None  # signs `X-Paid-MCP-User`; required in production
    # Upstream tools served free; a plan's `tools` makes one paid; any other upstream tool is not served.
    upstream_free_tools: CsvList = []
    upstream_timeout_seconds: float = Field(default=60.0, gt=0)

    # argon2id for local accounts' passwords; the defaults are argon2-cffi's (RFC 9106 low-memory).
    # Hashes made with other parameters are redone at the user's next sign-in.
    password_hash_time_cost: int = Field(default=3, ge=1)
    password_hash_memory_kib: int = Field(default=64 * 1024, ge=8)
    password_hash_parallelism: int = Field(default=4, ge=1)
    password_hash_concurrency: int = Field(default=2, ge=1)  # at once per replica; each holds its memory

    access_token_ttl_seconds: int = Field(default=3600, gt=0)
    refresh_token_ttl_seconds: int = Field(default=30 * 24 * 3600, gt=0)
    authorization_code_ttl_seconds: int = Field(default=300, gt=0)
    # Dynamic client registrations one client address may make per hour, on each replica.
    oauth_registrations_per_address_per_hour: int = Field(default=30, ge=1, le=100_000)
    browser_session_ttl_seconds: int = Field(default=12 * 3600, gt=0)

    # An external OpenID Connect provider instead of the built-in authorization server (unset: built-in).
    oidc_issuer: str | None = None
    oidc_audience: str | None = None  # None: the MCP resource URL
    oidc_client_id: str | None = None  # the payment page's confidential client at the issuer
    oidc_client_secret: SecretStr | None = None
    oidc_introspection: bool = False  # RFC 7662 for opaque access tokens instead of JWT validation
    oidc_scopes: str = "openid email profile"
    oidc_jwks_min_refresh_seconds: float = Field(default=10.0, ge=0)

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
        mode="before",
    )(_split_csv)

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
        hosts = [netloc, f"127.0.0.1:{self.port}", f"localhost:{self.port}"]
        return list(dict.fromkeys([*hosts, *self.mcp_allowed_hosts]))

    @cached_property
    def transport_allowed_origins(self) -> list[str]:
        parts = urlsplit(self.public_base_url)
        origins = [f"{parts.scheme}://{parts.netloc}"]
        return list(dict.fromkeys([*origins, *self.mcp_allowed_origins]))


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
