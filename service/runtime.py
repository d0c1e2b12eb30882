"""What lives for the whole life of one app instance, created in its lifespan and injected."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp.server import MCPServer
from mcp.server.auth.provider import TokenVerifier
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.requests import Request
from starlette.responses import Response

from service.audit.sampling import AuditSampler
from service.billing.plans import PlanCatalog
from service.billing.stripe_gateway import StripeGateway
from service.billing.stripe_sync.processor import WebhookProcessor
from service.billing.stripe_sync.reconciler import Reconciler
from service.billing.stripe_sync.verification import WebhookChecks
from service.db.engine import SessionFactory
from service.health.readiness import Readiness
from service.identity.client_registration import RegistrationLimiter
from service.identity.oauth_provider import DatabaseOAuthProvider
from service.identity.oidc.login import OidcLogin
from service.identity.passwords import PasswordHashing
from service.identity.sign_in import PasswordSignIn
from service.identity.throttle import SignInThrottle
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
    registration_limiter: RegistrationLimiter
    webhook_checks: WebhookChecks
    webhook_rejections: AuditSampler
    sign_in: PasswordSignIn
    sign_in_throttle: SignInThrottle
    client_addresses: ClientAddresses
    token_verifier: TokenVerifier  # what `/mcp` checks bearer tokens with
    oidc: OidcLogin | None = None  # set when OIDC_ISSUER names an external provider

    def form_page(
        self, request: Request, template: str, *, status_code: int = 200, **context: Any
    ) -> Response:
        """A page holding a form: rendered with a CSRF token, and the CSRF cookie set."""
        nonce, token = self.csrf.issue(request)
        page = self.pages.render(template, status_code=status_code, csrf_token=token, **context)
        return self.csrf.attach(page, nonce)

    def client_ip(self, request: Request) -> str | None:
        """The client's address as throttling and audit rows know it (see service/web/client_address.py)."""
        return self.client_addresses.of(request.scope)
