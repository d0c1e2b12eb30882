"""Webhook signing and delivery.

Signatures follow Stripe's scheme exactly (`Stripe-Signature: t=<unix>,v1=<hex hmac-sha256 of
"<t>.<payload>">`) with the endpoint's `whsec_` secret used verbatim as the HMAC key, so
`stripe.Webhook.construct_event` verifies them. `t` is wall-clock time, never the sandbox clock:
receivers compare it with their own clock (5 minutes tolerance), and an advanced sandbox clock
would make every signature look stale.

Delivery is one background task per sandbox, started by `Sandbox.running()`. A failed attempt
(non-2xx, timeout, connection error) is retried with exponential backoff until the configured
schedule's window closes (see `config.retry_schedule`); the last attempt is then logged with
`gave_up=True` and the event keeps counting the endpoint in `pending_webhooks`, as on Stripe.
In adversarial mode each delivery gets a random delay (so deliveries arrive out of order) and may
be sent twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
import hmac
import json
import logging
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from .config import SandboxConfig, retry_schedule

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def sign(payload: bytes, secret: str, timestamp: int) -> str:
    """The `Stripe-Signature` header value for `payload`."""
    signed = f"{timestamp}.".encode() + payload
    digest = hmac.new(secret.encode("utf-8"), signed, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def endpoint_wants(endpoint: Obj, event_type: str) -> bool:
    if endpoint["status"] != "enabled":
        return False
    enabled: list[str] = endpoint["enabled_events"]
    return "*" in enabled or event_type in enabled


@dataclass(order=True)
class _Delivery:
    due: float
    seq: int
    endpoint_id: str = field(compare=False)
    event_id: str = field(compare=False)
    attempt: int = field(compare=False, default=1)
    duplicate: bool = field(compare=False, default=False)
    first_attempt_at: float | None = field(compare=False, default=None)


@dataclass(frozen=True)
class DeliveryAttempt:
    """One HTTP attempt, kept so tests and `make run` logs can see what happened."""

    event_id: str
    event_type: str
    url: str
    attempt: int
    status_code: int | None
    error: str | None
    gave_up: bool = False

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


class WebhookDispatcher:
    """A due-time ordered queue of deliveries drained by one worker task."""

    def __init__(
        self,
        config: SandboxConfig,
        lookup_event: Callable[[str], Obj | None],
        lookup_endpoint: Callable[[str], tuple[Obj, str] | None],
        delivered: Callable[[str, str], None],
    ) -> None:
        self._config = config
        self._lookup_event = lookup_event
        self._lookup_endpoint = lookup_endpoint
        self._delivered = delivered
        self._heap: list[_Delivery] = []
        self._seq = 0
        self._in_flight = 0
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._rng = random.Random(config.adversarial_seed)  # noqa: S311 - chaos, not crypto
        self.attempts: deque[DeliveryAttempt] = deque(maxlen=10_000)
        self.running = False

    # Queueing --------------------------------------------------------------------------------

    def _push(self, delivery: _Delivery) -> None:
        heapq.heappush(self._heap, delivery)
        self._idle.clear()
        self._wakeup.set()

    def enqueue(self, event_id: str, endpoint_ids: list[str]) -> None:
        now = time.monotonic()
        for endpoint_id in endpoint_ids:
            delay = 0.0
            if not self._config.webhook_ordered:
                delay = self._rng.uniform(0, self._config.webhook_order_jitter)
            if self._config.adversarial:
                delay = self._rng.uniform(0, self._config.adversarial_max_delay)
            self._seq += 1
            self._push(_Delivery(now + delay, self._seq, endpoint_id, event_id))
            if self._config.adversarial and self._rng.random() < self._config.adversarial_duplicate_rate:
                self._seq += 1
                extra = self._rng.uniform(0, self._config.adversarial_max_delay)
                self._push(_Delivery(now + extra, self._seq, endpoint_id, event_id, duplicate=True))

    @property
    def pending(self) -> int:
        return len(self._heap) + self._in_flight

    async def wait_idle(self, within: float) -> None:
        """Until every queued delivery succeeded or ran out of attempts; TimeoutError otherwise."""
        if self.pending and not self.running:
            raise RuntimeError("webhook deliveries are queued but the sandbox is not running")
        async with asyncio.timeout(within):
            await self._idle.wait()

    # Worker ----------------------------------------------------------------------------------

    async def run(self, client: httpx.AsyncClient) -> None:
        self.running = True
        try:
            while True:
                if not self._heap:
                    if self._in_flight == 0:
                        self._idle.set()
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                delay = self._heap[0].due - time.monotonic()
                if delay > 0:
                    self._wakeup.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(delay):
                            await self._wakeup.wait()
                    continue
                delivery = heapq.heappop(self._heap)
                self._in_flight += 1
                try:
                    await self._attempt(client, delivery)
                except Exception:  # one broken delivery must not stop all later webhooks
                    log.exception("webhook delivery of %s crashed", delivery.event_id)
                finally:
                    self._in_flight -= 1
        finally:
            self.running = False

    async def _attempt(self, client: httpx.AsyncClient, delivery: _Delivery) -> None:
        event = self._lookup_event(delivery.event_id)
        found = self._lookup_endpoint(delivery.endpoint_id)
        if event is None or found is None:
            return  # the endpoint was deleted meanwhile: Stripe stops delivering too
        endpoint, secret = found
        payload = json.dumps(event, indent=2).encode("utf-8")
        headers = {
            "Content-Type": "application/json; charset=utf-8",
            "User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
            "Stripe-Signature": sign(payload, secret, int(time.time())),
        }
        status: int | None = None
        error: str | None = None
        try:
            response = await client.post(
                endpoint["url"], content=payload, headers=headers, timeout=self._config.webhook_timeout
            )
            status = response.status_code
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
        attempt = DeliveryAttempt(
            event["id"], event["type"], endpoint["url"], delivery.attempt, status, error
        )
        if attempt.ok:
            self.attempts.append(attempt)
            self._delivered(delivery.event_id, delivery.endpoint_id)
            return
        log.info(
            "webhook %s to %s failed (attempt %d): %s",
            event["id"],
            endpoint["url"],
            delivery.attempt,
            error or status,
        )
        base, max_delay, window = retry_schedule(self._config)
        started = delivery.first_attempt_at if delivery.first_attempt_at is not None else time.monotonic()
        backoff = min(base * (2 ** (delivery.attempt - 1)), max_delay)
        next_at = time.monotonic() + backoff
        if delivery.attempt >= self._config.webhook_max_attempts or next_at - started > window:
            log.warning(
                "giving up on webhook %s to %s after %d attempts",
                event["id"],
                endpoint["url"],
                delivery.attempt,
            )
            self.attempts.append(replace(attempt, gave_up=True))
            return
        self.attempts.append(attempt)
        self._seq += 1
        self._push(
            _Delivery(
                next_at,
                self._seq,
                delivery.endpoint_id,
                delivery.event_id,
                delivery.attempt + 1,
                delivery.duplicate,
                started,
            )
        )
