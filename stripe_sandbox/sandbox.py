"""The sandbox object: store, clock, event emission and the webhook worker's lifetime.

One instance per app (and so per test). Domain operations live in `billing.py` and
`checkout.py` as functions over this object; the methods here are the handful that tests and the
host app call directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator
from contextvars import ContextVar, Token
from typing import Any

import httpx

from . import objects
from .config import SandboxConfig
from .errors import resource_missing
from .ids import new_id
from .state import Store
from .webhooks import WebhookDispatcher, endpoint_wants

log = logging.getLogger(__name__)

Obj = dict[str, Any]

# (request id, idempotency key) of the API request being handled; events caused by the hosted pages
# or by the clock carry nulls there, as Stripe's do for automatic actions.
REQUEST_CONTEXT: ContextVar[tuple[str | None, str | None]] = ContextVar(
    "stripe_sandbox_request", default=(None, None)
)

# The test clock whose time applies to what is being done now (None: the sandbox's own clock).
CURRENT_CLOCK: ContextVar[str | None] = ContextVar("stripe_sandbox_clock", default=None)

_LABELS = {
    "checkout.session": "checkout.session",
    "billing_portal.session": "billing_portal.session",
    "test_helpers.test_clock": "test_helpers.test_clock",
}


class SandboxClock:
    """Sandbox time: wall-clock time plus an offset that only ever grows.

    Moving it forward is `clocks.advance_to` (the domain layer above), which runs everything that
    falls due on the way (renewals, retries, session expiry) in time order, as Stripe test clocks do.
    """

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    def now(self) -> int:
        clock_id = CURRENT_CLOCK.get()
        if clock_id is not None:
            clock = self._sandbox.store.get("test_helpers.test_clock", clock_id)
            if clock is not None:
                return int(clock["frozen_time"])
        return int(time.time()) + self._sandbox.store.clock_offset

    def set_now(self, timestamp: int) -> None:
        if timestamp <= self.now():
            return
        clock_id = CURRENT_CLOCK.get()
        clock = None if clock_id is None else self._sandbox.store.get("test_helpers.test_clock", clock_id)
        if clock is not None:
            clock["frozen_time"] = timestamp
        else:
            self._sandbox.store.clock_offset = timestamp - int(time.time())


def diff(before: Obj, after: Obj) -> Obj:
    """`data.previous_attributes`: old values of the top-level fields that changed."""
    previous: Obj = {}
    for key, old in before.items():
        new = after.get(key)
        if old == new:
            continue
        if key == "metadata" and isinstance(old, dict) and isinstance(new, dict):
            previous[key] = {
                field: old.get(field) for field in set(old) | set(new) if old.get(field) != new.get(field)
            }
        else:
            previous[key] = old
    return previous


class RateLimiter:
    """A token bucket per API key: `per_second` requests a second, bursts up to the same number."""

    def __init__(self, per_second: int) -> None:
        self._rate = float(per_second)
        self._buckets: dict[str, tuple[float, float]] = {}

    def allow(self, key: str) -> bool:
        now = time.monotonic()
        tokens, last = self._buckets.get(key, (self._rate, now))
        tokens = min(self._rate, tokens + (now - last) * self._rate)
        if len(self._buckets) > 1000:  # keys are checked before this, so only a handful exist
            self._buckets.clear()
        if tokens < 1:
            self._buckets[key] = (tokens, now)
            return False
        self._buckets[key] = (tokens - 1, now)
        return True


class OnClock:
    """Sets `CURRENT_CLOCK` for a `with` block; a class, because `contextlib.contextmanager`
    rewrites the traceback of exceptions passing through, which frozen ones (`Decline`) refuse."""

    def __init__(self, clock_id: str | None) -> None:
        self._clock_id = clock_id
        self._token: Token[str | None] | None = None

    def __enter__(self) -> None:
        self._token = CURRENT_CLOCK.set(self._clock_id)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            CURRENT_CLOCK.reset(self._token)


class Sandbox:
    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        if config.persist_path is not None and config.persist_path.exists():
            self.store = Store.load(config.persist_path)
        else:
            self.store = Store()
        self.clock = SandboxClock(self)
        self.rate_limiter = RateLimiter(config.rate_limit_per_second)
        self.webhooks = WebhookDispatcher(
            config, self._event_for_delivery, self._endpoint_for_delivery, self._delivered
        )
        # Like the Dashboard's request logs: (method, path) of the latest authenticated API requests.
        self.request_log: deque[tuple[str, str]] = deque(maxlen=10_000)
        # Meter events Stripe accepted but could not attach to a meter or customer: its meter error
        # reports (`code`, `message`, `meter`, `identifier`), latest last (see `meters`).
        self.meter_errors: deque[dict[str, Any]] = deque(maxlen=1000)
        # Meter event stream tokens (API v2) and when each expires, oldest first (`api_meter_stream`).
        self.meter_event_sessions: dict[str, int] = {}
        # Bumped by every change (`changed`); `due_hint` is (epoch, the next due time or None) as
        # of the last full look, so reads between changes need not scan every object again.
        self.epoch = 0
        self.due_hint: tuple[int, int | None] | None = None
        self._register_configured_endpoints()

    # Basics ----------------------------------------------------------------------------------

    def now(self) -> int:
        return self.clock.now()

    def get(self, kind: str, object_id: str, *, param: str = "id") -> Obj:
        found = self.store.get(kind, object_id)
        if found is None:
            raise resource_missing(_LABELS.get(kind, kind.replace("_", " ")), object_id, param=param)
        return found

    def clock_of(self, customer_id: str | None) -> str | None:
        """The test clock a customer (and so everything billed to it) follows, if any."""
        customer = None if customer_id is None else self.store.get("customer", customer_id)
        return None if customer is None else customer.get("test_clock")

    def on_clock(self, clock_id: str | None) -> OnClock:
        """Run the block in the time of test clock `clock_id` (the sandbox's clock for None)."""
        return OnClock(clock_id)

    def snapshot(self, obj: Obj) -> Obj:
        copied: Obj = objects.copy_tree(obj)
        return copied

    def changed(self) -> None:
        """Something in the store may have changed: what falls due next must be looked up again."""
        self.epoch += 1

    def save(self) -> None:
        self.changed()
        if self.config.persist_path is not None:
            self.store.save(self.config.persist_path)

    # Events ----------------------------------------------------------------------------------

    def emit(self, type_: str, obj: Obj, previous: Obj | None = None) -> Obj:
        endpoints = [
            endpoint["id"]
            for endpoint in self.store.objects["webhook_endpoint"].values()
            if endpoint_wants(endpoint, type_)
        ]
        self.changed()
        request_id, idempotency_key = REQUEST_CONTEXT.get()
        event = objects.event(
            id_=new_id("evt"),
            now=self.now(),
            type_=type_,
            data_object=self.snapshot(obj),
            previous_attributes=previous,
            pending_webhooks=len(endpoints),
            request_id=request_id,
            idempotency_key=idempotency_key,
        )
        self.store.put(event)
        self.store.priv(event["id"])["pending_endpoints"] = list(endpoints)
        self.webhooks.enqueue(event["id"], endpoints)
        return event

    def resend(self, event: Obj, endpoint_id: str | None) -> Obj:
        """The Dashboard's "Resend": deliver `event` again to one endpoint, or to every endpoint
        that subscribes to its type; the endpoint counts as pending until a delivery succeeds."""
        if endpoint_id is not None:
            self.get("webhook_endpoint", endpoint_id, param="for_webhook_endpoint")
            targets = [endpoint_id]
        else:
            targets = [
                endpoint["id"]
                for endpoint in self.store.objects["webhook_endpoint"].values()
                if endpoint_wants(endpoint, event["type"])
            ]
        pending: list[str] = self.store.priv(event["id"]).setdefault("pending_endpoints", [])
        pending.extend(target for target in targets if target not in pending)
        event["pending_webhooks"] = len(pending)
        self.webhooks.enqueue(event["id"], targets)
        return event

    def _delivered(self, event_id: str, endpoint_id: str) -> None:
        event = self.store.get("event", event_id)
        pending = self.store.priv(event_id).get("pending_endpoints", [])
        if endpoint_id in pending:
            pending.remove(endpoint_id)
        if event is not None:
            event["pending_webhooks"] = len(pending)

    def emit_updated(self, type_: str, before: Obj, after: Obj) -> Obj | None:
        previous = diff(before, after)
        if not previous:
            return None
        return self.emit(type_, after, previous)

    def _event_for_delivery(self, event_id: str) -> Obj | None:
        return self.store.get("event", event_id)

    def _endpoint_for_delivery(self, endpoint_id: str) -> tuple[Obj, str] | None:
        endpoint = self.store.get("webhook_endpoint", endpoint_id)
        if endpoint is None:
            return None
        return endpoint, str(self.store.priv(endpoint_id)["secret"])

    def _register_configured_endpoints(self) -> None:
        known = {
            (endpoint["url"], self.store.priv(endpoint["id"]).get("secret"))
            for endpoint in self.store.objects["webhook_endpoint"].values()
        }
        for url, secret in self.config.webhook_endpoints:
            if (url, secret) in known:
                continue
            self.add_webhook_endpoint(url, ["*"], secret=secret, description="configured")

    def add_webhook_endpoint(
        self,
        url: str,
        enabled_events: list[str],
        *,
        secret: str | None = None,
        description: str | None = None,
        metadata: dict[str, str] | None = None,
        api_version: str | None = None,
    ) -> tuple[Obj, str]:
        endpoint = objects.webhook_endpoint(
            id_=new_id("we"),
            now=self.now(),
            url=url,
            enabled_events=enabled_events,
            description=description,
            metadata=metadata or {},
            api_version=api_version,
        )
        secret = secret or new_id("whsec")
        self.store.put(endpoint)
        self.store.priv(endpoint["id"])["secret"] = secret
        return endpoint, secret

    # Lifetime --------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Sandbox]:
        """Run the webhook worker (and its httpx client) for the duration of the block."""
        async with httpx.AsyncClient(follow_redirects=False) as client:
            task = asyncio.create_task(self.webhooks.run(client), name="stripe-sandbox-webhooks")
            try:
                yield self
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                self.save()

    async def deliver_pending(self, within: float = 10.0) -> None:
        """Wait until every webhook queued so far was delivered (or given up on), for at most
        `within` seconds (then TimeoutError): tests synchronise on this instead of sleeping."""
        await self.webhooks.wait_idle(within)

    # Test helpers (also reachable over HTTP under /v1/test_helpers) --------------------------

    def set_renewal_failure(self, customer_id: str, fail: bool) -> None:
        """Make this customer's future renewal payments fail (or succeed again)."""
        self.get("customer", customer_id)
        self.store.priv(customer_id)["fail_renewals"] = fail
