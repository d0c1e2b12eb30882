"""The per-user count of `/mcp` requests in flight gives every place back, however a request ends."""

from __future__ import annotations

import pytest
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.types import Message, Receive, Scope, Send

from service.mcp_server.requests_in_flight import Place, RequestsInFlight, UserRequestLimit


def scope_of(subject: str, method: str = "POST") -> Scope:
    token = AccessToken(token="t", client_id="pat", scopes=[], subject=subject)
    return {"type": "http", "method": method, "headers": [], "user": AuthenticatedUser(token)}


async def receive() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


async def ignore(_: Message) -> None:
    return None


def test_places_are_per_user_and_come_back() -> None:
    in_flight = RequestsInFlight(max_per_user=2)
    assert in_flight.enter("ada") and in_flight.enter("ada")
    assert not in_flight.enter("ada")
    assert in_flight.enter("bob"), "another user has places of their own"
    in_flight.leave("ada")
    assert in_flight.enter("ada")
    for user in ("ada", "ada", "bob"):
        in_flight.leave(user)
    assert (in_flight.count("ada"), in_flight.count("bob")) == (0, 0)


async def test_a_request_that_fails_gives_its_place_back() -> None:
    in_flight = RequestsInFlight(max_per_user=1)

    async def failing(scope: Scope, receive: Receive, send: Send) -> None:
        assert in_flight.count("ada") == 1, "counted while it runs"
        raise RuntimeError("the app failed")

    with pytest.raises(RuntimeError):
        await UserRequestLimit(failing, in_flight)(scope_of("ada"), receive, ignore)
    assert in_flight.count("ada") == 0


async def test_streams_and_deletes_are_not_counted() -> None:
    in_flight = RequestsInFlight(max_per_user=1)
    assert in_flight.enter("ada")  # the one place is taken
    ran: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        ran.append(scope["method"])

    for method in ("GET", "DELETE"):
        await UserRequestLimit(app, in_flight)(scope_of("ada", method), receive, ignore)
    assert ran == ["GET", "DELETE"]


def test_a_handling_within_its_post_shares_the_posts_place() -> None:
    in_flight = RequestsInFlight(max_per_user=1)
    assert in_flight.enter("ada")
    place = Place(in_flight, "ada")
    place.hold()  # the SDK handles the message while the POST is under way (2026-07-28)
    assert in_flight.count("ada") == 1, "counted once, not once more for its handling"
    place.release()  # the client hung up: the POST ended, the handling goes on
    assert in_flight.count("ada") == 1, "still counted while its handling runs"
    place.release()
    assert in_flight.count("ada") == 0


def test_a_handling_that_begins_after_its_post_ended_is_counted_again() -> None:
    in_flight = RequestsInFlight(max_per_user=1)
    assert in_flight.enter("ada")
    place = Place(in_flight, "ada")
    place.release()  # the client hung up before the SDK began handling the message
    assert in_flight.enter("ada")  # another request took the one place meanwhile
    place.hold()
    assert in_flight.count("ada") == 2, "an admitted request counts even past the cap"
    place.release()
    in_flight.leave("ada")
    assert in_flight.count("ada") == 0
