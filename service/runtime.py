"""What lives for the whole life of one app instance: created by its lifespan, kept on `app.state`.

Endpoints never take it whole: each asks service/dependencies.py for the parts it uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mcp.server import MCPServer
from mcp.server.auth.provider import TokenVerifier
from sqlalchemy.ext.asyncio import AsyncEngine

from service.audit.sampling import AuditSampler
from service.billing.plans import PlanCatalog
from service.billing.stripe_gateway import StripeGateway
from service.db.engine import SessionFactory
from service.health.readiness import Readiness
from service.identity.oauth_provider import DatabaseOAuthProvider
from service.identity.oidc.login import OidcLogin
from service.identity.passwords import PasswordHashing
from service.identity.sign_in import PasswordSignIn
from service.identity.throttle import AddressRateLimiter, SignInThrottle
from service.observability.metrics import ServiceMetrics
from service.paywall.bus import CompletionBus
from service.paywall.gate import Paywall
from service.paywall.notifier import SessionNotifier
from service.settings import Settings
from service.web.client_address import ClientAddresses
from service.web.cookies import CookiePolicy
from service.web.csrf import CsrfProtect
from service.web.pages import Pages

if TYPE_CHECKING:  # the optional `sandbox` extra: imported only by type checkers
    from stripe_sandbox import Sandbox
from service.billing.stripe_sync.processor import WebhookProcessor
from service.billing.stripe_sync.reconciler import Reconciler
from service.billing.stripe_sync.verification import WebhookChecks


@dataclass
class Runtime:
    settings: Settings
    engine: AsyncEngine
    sessions: SessionFactory
    oauth: DatabaseOAuthProvider
    mcp: MCPServer
    pages: Pages
    cookies: CookiePolicy
    csrf: CsrfProtect
    readiness: Readiness
    catalog: PlanCatalog
    stripe: StripeGateway
    checkout_domain: str
    bus: CompletionBus
    paywall: Paywall
    notifier: SessionNotifier
    webhooks: WebhookProcessor
    reconciler: Reconciler
    sandbox: Sandbox | None
    metrics: ServiceMetrics
    passwords: PasswordHashing
    registration_limiter: AddressRateLimiter
    webhook_checks: WebhookChecks
    webhook_rejections: AuditSampler
    page_audits: AuditSampler  # which payment page views and refusals (and billing's) get an audit row
    sign_in: PasswordSignIn
    sign_in_throttle: SignInThrottle
    client_addresses: ClientAddresses
    token_verifier: TokenVerifier  # what `/mcp` checks bearer tokens with
    oidc: OidcLogin | None = None  # set when OIDC_ISSUER names an external provider
