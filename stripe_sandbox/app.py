"""The ASGI app: routes, and the lifespan that runs webhook delivery.

Routing is relative to the ASGI `root_path`, so the same app works served standalone by uvicorn and
mounted under a prefix in the service (`Mount("/stripe-sandbox", app)`). Hosted page URLs handed out
in API responses come from `SandboxConfig.public_base_url`, because only the configuration knows
what address the browser sees.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from . import (
    api_billing,
    api_catalog,
    api_checkout,
    api_clocks,
    api_events,
    api_meter_stream,
    api_meters,
    api_subscriptions,
    challenge_page,
    checkout_page,
    hosted_pages,
    portal_page,
    test_helpers,
)
from .api import Call, Handler, handle
from .config import SandboxConfig
from .errors import unrecognized_url
from .idempotency import IdempotencyKeys
from .sandbox import Sandbox

Endpoint = Callable[[Request], Awaitable[Response]]


def _endpoint(handler: Handler, route: str) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        return await handle(request, handler, route)

    endpoint.__name__ = handler.__name__
    return endpoint


async def _not_found(request: Request) -> Response:
    def handler(call: Call) -> dict[str, object]:
        raise unrecognized_url(request.method, request.url.path)

    return await handle(request, handler)


def _api_routes() -> list[Route]:
    table: list[tuple[str, str, Handler]] = [
        ("/v1/products", "GET", api_catalog.list_products),
        ("/v1/products", "POST", api_catalog.create_product),
        ("/v1/products/search", "GET", api_catalog.search_products),
        ("/v1/products/{id}", "GET", api_catalog.retrieve_product),
        ("/v1/products/{id}", "POST", api_catalog.update_product),
        ("/v1/prices", "GET", api_catalog.list_prices),
        ("/v1/prices", "POST", api_catalog.create_price),
        ("/v1/prices/search", "GET", api_catalog.search_prices),
        ("/v1/prices/{id}", "GET", api_catalog.retrieve_price),
        ("/v1/prices/{id}", "POST", api_catalog.update_price),
        ("/v1/customers", "GET", api_catalog.list_customers),
        ("/v1/customers", "POST", api_catalog.create_customer),
        ("/v1/customers/search", "GET", api_catalog.search_customers),
        ("/v1/customers/{id}", "GET", api_catalog.retrieve_customer),
        ("/v1/customers/{id}", "POST", api_catalog.update_customer),
        ("/v1/customers/{id}", "DELETE", api_catalog.delete_customer),
        ("/v1/checkout/sessions", "GET", api_checkout.list_sessions),
        ("/v1/checkout/sessions", "POST", api_checkout.create_session),
        ("/v1/checkout/sessions/{id}", "GET", api_checkout.retrieve_session),
        ("/v1/checkout/sessions/{id}/expire", "POST", api_checkout.expire_session),
        ("/v1/checkout/sessions/{id}/line_items", "GET", api_checkout.list_line_items),
        ("/v1/billing_portal/sessions", "POST", api_checkout.create_portal_session),
        ("/v1/subscriptions", "GET", api_billing.list_subscriptions),
        ("/v1/subscriptions", "POST", api_subscriptions.create_subscription),
        ("/v1/subscriptions/search", "GET", api_billing.search_subscriptions),
        ("/v1/subscriptions/{id}", "GET", api_billing.retrieve_subscription),
        ("/v1/subscriptions/{id}", "POST", api_billing.update_subscription),
        ("/v1/subscriptions/{id}", "DELETE", api_billing.cancel_subscription),
        ("/v1/invoices", "GET", api_billing.list_invoices),
        ("/v1/invoices/create_preview", "POST", api_billing.create_preview),
        ("/v1/subscription_items", "GET", api_billing.list_subscription_items),
        ("/v1/invoices/{id}", "GET", api_billing.retrieve_invoice),
        ("/v1/invoices/{id}/lines", "GET", api_billing.list_invoice_lines),
        ("/v1/invoices/{id}/pay", "POST", api_subscriptions.pay_invoice),
        ("/v1/invoice_payments", "GET", api_billing.list_invoice_payments),
        ("/v1/invoice_payments/{id}", "GET", api_billing.retrieve_invoice_payment),
        ("/v1/charges", "GET", api_billing.list_charges),
        ("/v1/charges/{id}", "GET", api_billing.retrieve_charge),
        ("/v1/payment_intents", "GET", api_billing.list_payment_intents),
        ("/v1/payment_intents", "POST", api_subscriptions.create_payment_intent),
        ("/v1/payment_intents/{id}", "GET", api_billing.retrieve_payment_intent),
        ("/v1/payment_intents/{id}/confirm", "POST", api_subscriptions.confirm_payment_intent),
        ("/v1/payment_methods/{id}", "GET", api_billing.retrieve_payment_method),
        ("/v1/payment_methods/{id}/attach", "POST", api_subscriptions.attach_payment_method),
        ("/v1/payment_methods/{id}/detach", "POST", api_subscriptions.detach_payment_method),
        ("/v1/customers/{id}/payment_methods", "GET", api_subscriptions.list_customer_payment_methods),
        ("/v1/test_helpers/test_clocks", "GET", api_clocks.list_clocks),
        ("/v1/test_helpers/test_clocks", "POST", api_clocks.create_clock),
        ("/v1/test_helpers/test_clocks/{id}", "GET", api_clocks.retrieve_clock),
        ("/v1/test_helpers/test_clocks/{id}", "DELETE", api_clocks.delete_clock),
        ("/v1/test_helpers/test_clocks/{id}/advance", "POST", api_clocks.advance_clock),
        ("/v1/refunds", "GET", api_billing.list_refunds),
        ("/v1/refunds", "POST", api_billing.create_refund),
        ("/v1/refunds/{id}", "GET", api_billing.retrieve_refund),
        ("/v1/disputes", "GET", api_billing.list_disputes),
        ("/v1/disputes/{id}", "GET", api_billing.retrieve_dispute),
        ("/v1/disputes/{id}", "POST", api_billing.update_dispute),
        ("/v1/disputes/{id}/close", "POST", api_billing.close_dispute),
        ("/v1/balance_transactions", "GET", api_billing.list_balance_transactions),
        ("/v1/balance_transactions/{id}", "GET", api_billing.retrieve_balance_transaction),
        ("/v1/events", "GET", api_events.list_events),
        ("/v1/events/{id}", "GET", api_events.retrieve_event),
        ("/v1/events/{id}/retry", "POST", api_events.retry_event),
        ("/v1/webhook_endpoints", "GET", api_events.list_endpoints),
        ("/v1/webhook_endpoints", "POST", api_events.create_endpoint),
        ("/v1/webhook_endpoints/{id}", "GET", api_events.retrieve_endpoint),
        ("/v1/webhook_endpoints/{id}", "POST", api_events.update_endpoint),
        ("/v1/webhook_endpoints/{id}", "DELETE", api_events.delete_endpoint),
        ("/v1/billing/meters", "GET", api_meters.list_meters),
        ("/v1/billing/meters", "POST", api_meters.create_meter),
        ("/v1/billing/meters/{id}", "GET", api_meters.retrieve_meter),
        ("/v1/billing/meters/{id}", "POST", api_meters.update_meter),
        ("/v1/billing/meters/{id}/deactivate", "POST", api_meters.deactivate_meter),
        ("/v1/billing/meters/{id}/reactivate", "POST", api_meters.reactivate_meter),
        ("/v1/billing/meters/{id}/event_summaries", "GET", api_meters.list_event_summaries),
        ("/v1/billing/meter_events", "POST", api_meters.create_meter_event),
        ("/v1/test_helpers/sandbox/advance", "POST", test_helpers.advance),
        ("/v1/test_helpers/customers/{id}/fail_renewals", "POST", test_helpers.fail_renewals),
        ("/v1/test_helpers/checkout/sessions/{id}/pay", "POST", test_helpers.pay_session),
        ("/v1/test_helpers/charges/{id}/dispute", "POST", test_helpers.dispute),
    ]
    return [
        Route(path, _endpoint(handler, f"{method} {path}"), methods=[method])
        for path, method, handler in table
    ]


def create_sandbox_app(config: SandboxConfig) -> Starlette:
    """A fresh sandbox (its own state) wrapped in an ASGI app; see the package docstring."""
    sandbox = Sandbox(config)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with sandbox.running():
            yield

    routes = [
        *_api_routes(),
        Route("/v1/{rest:path}", _not_found, methods=["GET", "POST", "DELETE", "PUT", "PATCH"]),
        Route("/v2/billing/meter_event_session", api_meter_stream.create_session, methods=["POST"]),
        Route("/v2/billing/meter_event_stream", api_meter_stream.create_events, methods=["POST"]),
        Route("/v2/{rest:path}", _not_found, methods=["GET", "POST", "DELETE", "PUT", "PATCH"]),
        Route("/c/pay/{id}", checkout_page.show, methods=["GET"]),
        Route("/c/pay/{id}", checkout_page.submit, methods=["POST"]),
        Route("/c/pay/{id}/3ds", checkout_page.submit_challenge, methods=["POST"]),
        Route("/p/session/{secret}", portal_page.show, methods=["GET"]),
        Route("/3ds/{pi}/{secret}", challenge_page.show, methods=["GET"]),
        Route("/receipts/{id}/{secret}", hosted_pages.receipt, methods=["GET"]),
        Route("/i/{id}/{secret}", hosted_pages.invoice, methods=["GET"]),
        Route("/3ds/{pi}/{secret}", challenge_page.submit, methods=["POST"]),
        Route("/p/session/{secret}/flow", portal_page.start_flow, methods=["GET"]),
        Route("/p/session/{secret}/payment-method", portal_page.show_payment_method, methods=["GET"]),
        Route("/p/session/{secret}/payment-method", portal_page.submit_payment_method, methods=["POST"]),
        Route("/p/session/{secret}/subscriptions/{sub}/update", portal_page.show_update, methods=["GET"]),
        Route("/p/session/{secret}/subscriptions/{sub}/update", portal_page.submit_update, methods=["POST"]),
        Route("/p/session/{secret}/subscriptions/{sub}/{action:str}", portal_page.change, methods=["POST"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.sandbox = sandbox
    app.state.idempotency = IdempotencyKeys()
    return app
