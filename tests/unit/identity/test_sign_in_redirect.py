"""`SignedIn`'s redirect: back to a path on this site after signing in, never anywhere else."""

from __future__ import annotations

import pytest

from service.dependencies import sign_in_redirect


def test_returns_to_a_local_path() -> None:
    refusal = sign_in_redirect("/pay/el_1")
    assert refusal.response.status_code == 303
    assert refusal.response.headers["location"] == "/login?next=%2Fpay%2Fel_1"


@pytest.mark.parametrize("path", ["//evil.example/x", "/\\evil.example/x", "https://evil.example/", "", None])
def test_never_returns_off_site(path: str | None) -> None:
    assert sign_in_redirect(path).response.headers["location"] == "/login"
