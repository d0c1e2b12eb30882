"""The one configuration object, read from the environment (and an optional `.env` file).

`Settings` holds one model per domain (`settings.stripe`, `settings.oidc`, ...), each validating its
own fields; each domain is handed its own section. The environment variables stay flat
(`STRIPE_SECRET_KEY`, `LOG_FORMAT`): every section field's alias is its variable's name, and
`Settings` routes flat names, from the environment or from keyword arguments, to their sections.
Checks that span domains (production refusals, listening beyond loopback) live on `Settings`.

Every default is an embedded-development default: SQLite in `./var`, the built-in Stripe sandbox,
well-known development secrets. Outside development mode those defaults are refused at start-up,
so a production deployment cannot run on a secret that is printed in this package.
"""

from __future__ import annotations

import os
from functools import cache, cached_property
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, create_model, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SecretsSettingsSource,
    SettingsConfigDict,
)

from service.settings.checks import is_loopback_host, oidc_issuer_problem, upstream_url_problem
from service.settings.sections import (
    DEV_REQUEST_STATE_KEY,
    DEV_SECRET_KEY,
    DEV_WEBHOOK_SECRET,
    SANDBOX_SECRET_KEY,
    BillingSettings,
    ConfigurationError,
    DatabaseSettings,
    GatewaySettings,
    HttpSettings,
    IdentitySettings,
    McpSettings,
    ObservabilitySettings,
    OidcSettings,
    PasswordHashingSettings,
    PaywallSettings,
    RetentionSettings,
    Section,
    SignInSettings,
    StripeSandboxSettings,
    StripeSettings,
    ToolSettings,
    TuningSettings,
)

__all__ = [
    "DEV_REQUEST_STATE_KEY",
    "DEV_SECRET_KEY",
    "DEV_WEBHOOK_SECRET",
    "SANDBOX_SECRET_KEY",
    "BillingSettings",
    "ConfigurationError",
    "DatabaseSettings",
    "GatewaySettings",
    "HttpSettings",
    "IdentitySettings",
    "McpSettings",
    "ObservabilitySettings",
    "OidcSettings",
    "PasswordHashingSettings",
    "PaywallSettings",
    "RetentionSettings",
    "Section",
    "Settings",
    "SignInSettings",
    "StripeSandboxSettings",
    "StripeSettings",
    "ToolSettings",
    "TuningSettings",
    "flat_names",
    "listen_problem",
]

_CONFIG = SettingsConfigDict(
    env_file=".env",
    env_file_encoding="utf-8",
    extra="ignore",
    frozen=True,
    validate_default=True,
    use_attribute_docstrings=True,
)


class Settings(BaseSettings):
    """Service configuration: the environment, then one section per domain.

    `Settings(stripe_secret_key=...)` takes the flat variable names in lower case, like the
    environment does; `Settings(stripe=StripeSettings(...))` takes a whole section.
    """

    model_config = _CONFIG

    environment: Literal["development", "production"] = "development"
    """`production` refuses development secrets, the sandbox key and plain `http://`, and turns on `Secure`
    `__Host-` cookies and HSTS."""

    http: HttpSettings = Field(default_factory=HttpSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    observability: ObservabilitySettings = Field(default_factory=ObservabilitySettings)
    mcp: McpSettings = Field(default_factory=McpSettings)
    stripe: StripeSettings = Field(default_factory=StripeSettings)
    stripe_sandbox: StripeSandboxSettings = Field(default_factory=StripeSandboxSettings)
    billing: BillingSettings = Field(default_factory=BillingSettings)
    tools: ToolSettings = Field(default_factory=ToolSettings)
    paywall: PaywallSettings = Field(default_factory=PaywallSettings)
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    identity: IdentitySettings = Field(default_factory=IdentitySettings)
    password_hashing: PasswordHashingSettings = Field(default_factory=PasswordHashingSettings)
    sign_in: SignInSettings = Field(default_factory=SignInSettings)
    oidc: OidcSettings = Field(default_factory=OidcSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    tuning: TuningSettings = Field(default_factory=TuningSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Read the flat variable names; SECRETS_DIR names a directory of files, one per setting.

        A secret file is named like the setting's variable (`SECRET_KEY`) and holds its value (e.g. a
        mounted Kubernetes Secret); the environment and `.env` still take precedence over it.
        """
        flat = _flat_settings_class()
        env_file = dotenv_settings.env_file if isinstance(dotenv_settings, DotEnvSettingsSource) else None
        sources: list[PydanticBaseSettingsSource] = [
            init_settings,
            EnvSettingsSource(flat),
            DotEnvSettingsSource(flat, env_file=env_file),
        ]
        secrets_dir = os.environ.get("SECRETS_DIR")
        if secrets_dir:
            if not Path(secrets_dir).is_dir():
                raise ConfigurationError(f"SECRETS_DIR={secrets_dir} is not a directory")
            sources.append(SecretsSettingsSource(flat, secrets_dir=secrets_dir))
        # Grouped per source, so a section passed whole still outranks the environment's variables.
        return tuple(_BySection(settings_cls, source) for source in sources)

    @model_validator(mode="before")
    @classmethod
    def _route_flat_names(cls, data: Any) -> Any:
        """Move `stripe_secret_key=...` into `stripe`, as for `Settings.model_validate({...})`."""
        return _by_section(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _json_responses_need_the_error_style(self) -> Settings:
        if self.mcp.json_response and self.paywall.elicitation_style == "request":
            raise ConfigurationError(
                "MCP_JSON_RESPONSE=true removes the per-request stream that ELICITATION_STYLE=request needs; "
                "use ELICITATION_STYLE=error with JSON responses"
            )
        return self

    @model_validator(mode="after")
    def _urls_are_safe_for_the_environment(self) -> Settings:
        development = self.is_development
        issuer, upstream = self.oidc.issuer, self.gateway.url
        if issuer is not None and (problem := oidc_issuer_problem(issuer, development=development)):
            raise ConfigurationError(problem)
        if upstream and (problem := upstream_url_problem(upstream, development=development)):
            raise ConfigurationError(problem)
        return self

    @model_validator(mode="after")
    def _upstream_answers_fit_a_result(self) -> Settings:
        if self.gateway.url and self.gateway.max_response_bytes < self.tools.max_output_bytes:
            raise ConfigurationError(
                f"UPSTREAM_MAX_RESPONSE_BYTES ({self.gateway.max_response_bytes}) is below "
                f"MAX_TOOL_OUTPUT_BYTES ({self.tools.max_output_bytes}): "
                "an upstream result the cap allows could not be read"
            )
        return self

    @model_validator(mode="after")
    def _development_stays_on_loopback(self) -> Settings:
        if problem := listen_problem(self.http, development=self.is_development):
            raise ConfigurationError(problem)
        return self

    @model_validator(mode="after")
    def _refuse_unsafe_production(self) -> Settings:
        if self.environment == "development":
            return self
        problems: list[str] = []
        if self.stripe.api_base:
            problems.append("STRIPE_API_BASE is set (production talks to Stripe's own API only)")
        if self.gateway.url and self.gateway.user_header_secret is None:
            problems.append("UPSTREAM_USER_HEADER_SECRET is required with UPSTREAM_MCP_URL")
        if not self.http.public_base_url.startswith("https://"):
            problems.append("PUBLIC_BASE_URL must use https:// outside development")
        secret_key = self.http.secret_key.get_secret_value()
        if secret_key == DEV_SECRET_KEY or len(secret_key) < 32:
            problems.append("SECRET_KEY is the development default or shorter than 32 characters")
        if DEV_WEBHOOK_SECRET in self.stripe.webhook_secrets:
            problems.append("STRIPE_WEBHOOK_SECRET is the development default")
        if not self.stripe.webhook_secrets or not all(
            secret.startswith("whsec_") for secret in self.stripe.webhook_secrets
        ):
            problems.append(
                "STRIPE_WEBHOOK_SECRET must name Stripe signing secrets (whsec_...): no webhook would verify"
            )
        if DEV_REQUEST_STATE_KEY in self.mcp.request_state_keys:
            problems.append("REQUEST_STATE_KEYS is the development default")
        if self.stripe.uses_sandbox:
            problems.append("STRIPE_SECRET_KEY is the built-in sandbox key")
        elif not self.stripe.is_live and not self.stripe.allow_test_mode:
            problems.append(
                "STRIPE_SECRET_KEY is not a live key (sk_live_/rk_live_): test cards would unlock paid tools "
                "(a staging deployment sets STRIPE_ALLOW_TEST_MODE=true)"
            )
        if not self.password_hashing.meets_owasp_minimum:
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
        return self.observability.log_format or ("text" if self.is_development else "json")

    @property
    def metrics_served(self) -> bool:
        if self.observability.metrics_enabled is not None:
            return self.observability.metrics_enabled
        return self.is_development or self.observability.metrics_port != 0

    @property
    def oidc_expected_audience(self) -> str:
        return self.oidc.expected_audience(self.http.mcp_resource_url)

    @cached_property
    def transport_allowed_hosts(self) -> list[str]:
        netloc = urlsplit(self.http.public_base_url).netloc
        hosts = [netloc, *self.http.loopback_netlocs]
        return list(dict.fromkeys([*hosts, *self.mcp.allowed_hosts]))

    @cached_property
    def transport_allowed_origins(self) -> list[str]:
        """The public origin; in development also this port's loopback origins (local browser tools)."""
        parts = urlsplit(self.http.public_base_url)
        origins = [f"{parts.scheme}://{parts.netloc}"]
        if self.is_development:
            origins += [f"http://{netloc}" for netloc in self.http.loopback_netlocs]
        return list(dict.fromkeys([*origins, *self.mcp.allowed_origins]))


def _by_section(data: dict[str, Any]) -> dict[str, Any]:
    """Flat names moved into their sections' dicts (a whole section given too is the base they
    update); names that are no setting are dropped, as the environment's other variables are."""
    routed: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {}
    owners = _section_of_flat_name()
    for key, value in data.items():
        if key in _section_fields():
            whole = value.model_dump(by_alias=True) if isinstance(value, BaseModel) else dict(value)
            sections[key] = {**whole, **sections.get(key, {})}
        elif key in Settings.model_fields:
            routed[key] = value
        elif (section := owners.get(key.lower())) is not None:
            sections.setdefault(section, {})[key.lower()] = value
    return {**routed, **sections}


class _BySection(PydanticBaseSettingsSource):
    """Wraps a source that reads flat names and hands its values on grouped by section."""

    def __init__(self, settings_cls: type[BaseSettings], source: PydanticBaseSettingsSource) -> None:
        super().__init__(settings_cls)
        self._source = source

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ reads everything through the wrapped source

    def __call__(self) -> dict[str, Any]:
        return _by_section(self._source())


@cache
def _section_fields() -> dict[str, type[Section]]:
    """The sections of `Settings`, by attribute name, in declaration order."""
    sections: dict[str, type[Section]] = {}
    for name, field in Settings.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, Section):
            sections[name] = field.annotation
    return sections


def flat_names() -> dict[str, tuple[str, str]]:
    """Every section field's variable name (lower case) -> (section attribute, field name)."""
    names: dict[str, tuple[str, str]] = {}
    for section, model in _section_fields().items():
        for field_name, field in model.model_fields.items():
            names[field.alias or field_name] = (section, field_name)
    return names


@cache
def _section_of_flat_name() -> dict[str, str]:
    return {flat: section for flat, (section, _) in flat_names().items()}


@cache
def _flat_settings_class() -> type[BaseSettings]:
    """A settings class with one raw-string field per variable, so the stock sources read flat names.

    Its values are strings as the environment holds them; the sections parse and validate them.
    """
    fields: dict[str, Any] = {name: (str | None, None) for name in ["environment", *flat_names()]}
    flat: type[BaseSettings] = create_model("FlatEnvironment", __base__=_FlatBase, **fields)
    return flat


class _FlatBase(BaseSettings):
    model_config = _CONFIG


def listen_problem(http: HttpSettings, *, development: bool) -> str | None:
    """Why the service must not listen on `http.host`, or None.

    Development settings carry well-known secrets and serve the Stripe sandbox, so they listen on
    loopback only unless `ALLOW_NON_LOOPBACK_IN_DEVELOPMENT` says otherwise.
    """
    if not development or http.allow_non_loopback_in_development:
        return None
    if is_loopback_host(http.host):
        return None
    return (
        f"refusing to listen on HOST={http.host or '(all interfaces)'} with ENVIRONMENT=development: "
        "use a loopback host, ENVIRONMENT=production, or ALLOW_NON_LOOPBACK_IN_DEVELOPMENT=true"
    )
