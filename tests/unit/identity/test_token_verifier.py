"""`StoredTokenVerifier` asks the token store (through its cache) about plausible tokens only."""

from __future__ import annotations

from typing import Any, cast

from mcp.server.auth.provider import AccessToken

from service.identity.token_verifier import MAX_TOKEN_LENGTH, StoredTokenVerifier


class Store:
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def load_access_token(self, token: str) -> AccessToken | None:
        self.asked.append(token)
        return AccessToken(token=token, client_id="c", scopes=[]) if token == "good" else None


async def test_answers_what_the_store_answers_and_skips_implausible_tokens() -> None:
    store = Store()
    verifier = StoredTokenVerifier(cast(Any, store))

    assert (await verifier.verify_token("good")) is not None
    assert await verifier.verify_token("bad") is None
    assert await verifier.verify_token("") is None
    assert await verifier.verify_token("x" * (MAX_TOKEN_LENGTH + 1)) is None
    assert store.asked == ["good", "bad"]
