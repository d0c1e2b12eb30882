"""Stripe GETs answered as plain JSON, without stripe-python's request and response objects.

The webhook path reads one to three Stripe objects per event and only looks at a few fields of
each. Going through the same client's HTTP layer (`HTTPClient.request_with_retries_async`:
stripe-python's own retries and telemetry header) with the headers built once costs about half the
CPU of `StripeClient.raw_request_async`, which builds the request's headers and log lines and the
response's object afresh on every call (docs/adr/0008-measured-choices.md).

Only a 200 is answered here. Anything else is asked again through `StripeClient`, so every error
a caller sees is stripe-python's own exception, raised from stripe-python's own reading of it.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import stripe


class StripeReads:
    def __init__(
        self,
        client: stripe.StripeClient,
        http_client: stripe.HTTPClient,
        *,
        api_key: str,
        api_base: str,
        api_version: str,
        max_network_retries: int,
    ) -> None:
        self._client = client
        self._http_client = http_client
        self._api_base = api_base.rstrip("/")
        self._max_network_retries = max_network_retries
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "Stripe-Version": api_version,
            "User-Agent": f"Stripe/v1 PythonBindings/{stripe.VERSION}",
            "X-Stripe-Client-User-Agent": json.dumps(
                {
                    "bindings_version": stripe.VERSION,
                    "lang": "python",
                    "httplib": http_client.name,
                    "lang_version": platform.python_version(),
                }
            ),
        }

    async def get(self, path: str, **params: Any) -> Mapping[str, Any]:
        """`GET path?params` as the JSON Stripe answered; a `stripe.StripeError` for anything but 200."""
        query = encode_query(params)
        url = f"{self._api_base}{path}?{query}" if query else f"{self._api_base}{path}"
        body, status, _ = await self._http_client.request_with_retries_async(
            "get", url, self._headers, None, max_network_retries=self._max_network_retries
        )
        if status == 200:
            answer = json.loads(body)
            if isinstance(answer, dict):
                return answer
        response = await self._client.raw_request_async("get", path, **params)
        data: Mapping[str, Any] = response.data
        return data


def encode_query(params: Mapping[str, Any]) -> str:
    """Stripe's form encoding of GET parameters: nested mappings as `key[sub]`, booleans as
    `true`/`false`, None left out (as stripe-python does)."""
    pairs: list[tuple[str, str]] = []

    def add(key: str, value: Any) -> None:
        if value is None:
            return
        if isinstance(value, Mapping):
            for sub_key, sub_value in value.items():
                add(f"{key}[{sub_key}]", sub_value)
        elif isinstance(value, list | tuple):
            for index, item in enumerate(value):
                add(f"{key}[{index}]", item)
        elif isinstance(value, bool):
            pairs.append((key, "true" if value else "false"))
        else:
            pairs.append((key, str(value)))

    for key, value in params.items():
        add(key, value)
    return urlencode(pairs)
