"""Helpers for the observability tests: scraping /metrics, capturing log lines, a paid legacy flow."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from prometheus_client.parser import text_string_to_metric_families

from service.observability.logs import build_handler
from tests.support.browserless import csrf_token, log_in_through_form
from tests.support.mcp_clients import ClientProbe, call_expecting_32042, probed_client
from tests.support.payment import GOOD_CARD, checkout_session_id, pay_checkout_session
from tests.support.service import DEFAULT_PASSWORD, RunningService

CHART_ARGS = {"values": [3, 1, 2], "labels": ["a", "b", "c"]}


class Samples(dict[tuple[str, frozenset[tuple[str, str]]], float]):
    def value(self, name: str, **labels: str) -> float:
        return self.get((name, frozenset(labels.items())), 0.0)

    def total(self, name: str, **labels: str) -> float:
        """Sum over every series of `name` whose labels include `labels`."""
        wanted = set(labels.items())
        return sum(value for (sample, have), value in self.items() if sample == name and wanted <= have)


def parse_metrics(text: str) -> Samples:
    samples = Samples()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


async def scrape(base_url: str) -> Samples:
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        response = await http.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return parse_metrics(response.text)


@contextmanager
def captured_logs(level: int = logging.INFO) -> Iterator[io.StringIO]:
    """Everything logged in this process, through the service's own JSON handler."""
    stream = io.StringIO()
    handler = build_handler("json", stream)
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)


def json_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


@dataclass
class PaidFlow:
    """What a paid 2025-11-25 flow used, so tests can look for it in logs."""

    token: str
    elicitation_id: str
    session_cookie: str
    checkout_session_id: str
    during: Samples  # scraped while the client's session was open


async def paid_legacy_flow(service: RunningService, username: str) -> PaidFlow:
    """-32042, then sign in, pay by card, hear the completion, and call the tool again."""
    await service.add_user(username)
    token = (await service.personal_token(username)).secret
    probe = ClientProbe()
    async with probed_client(service.mcp_url, token, probe, mode="legacy") as client:
        url = (await call_expecting_32042(client, "ascii_chart", CHART_ARGS)).url
        during = await scrape(service.base_url)
        path = urlsplit(url).path
        async with service.http() as browser:
            login = await log_in_through_form(browser, f"/login?next={path}", username, DEFAULT_PASSWORD)
            assert login.status_code == 303, login.text
            session_cookie = browser.cookies.get("session")
            assert session_cookie
            page = await browser.get(path)
            started = await browser.post(path, data={"csrf_token": csrf_token(page.text)})
            assert started.status_code == 303, started.text
        checkout = checkout_session_id(started.headers["location"])
        await pay_checkout_session(service.stripe, checkout, GOOD_CARD)
        elicitation_id = await probe.wait_for_completion()
        result = await client.call_tool("ascii_chart", CHART_ARGS)
        assert not result.is_error, result
    assert url.endswith(elicitation_id)
    return PaidFlow(token, elicitation_id, session_cookie, checkout, during)
