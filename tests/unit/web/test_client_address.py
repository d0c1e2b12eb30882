"""The client address: the TCP peer, or what a trusted proxy says in X-Forwarded-For if it is an address."""

from __future__ import annotations

from service.web.client_address import ClientAddresses, parse_networks


def scope(peer: str, forwarded_for: str | None = None) -> dict[str, object]:
    headers = [(b"x-forwarded-for", forwarded_for.encode())] if forwarded_for is not None else []
    return {"type": "http", "client": (peer, 50000), "headers": headers}


def test_without_trusted_proxies_the_peer_is_the_client() -> None:
    addresses = ClientAddresses(())
    assert addresses.of(scope("127.0.0.1", "6.6.6.6")) == "127.0.0.1"
    assert addresses.of({"type": "http", "headers": []}) is None


def test_x_forwarded_for_counts_only_from_a_trusted_peer() -> None:
    addresses = ClientAddresses(parse_networks(["10.0.0.0/8"]))
    assert addresses.of(scope("10.1.2.3", "203.0.113.5")) == "203.0.113.5"
    assert addresses.of(scope("192.0.2.1", "203.0.113.5")) == "192.0.2.1"


def test_the_rightmost_untrusted_hop_is_the_client() -> None:
    addresses = ClientAddresses(parse_networks(["10.0.0.0/8"]))
    forged_then_real = "6.6.6.6, 203.0.113.5, 10.0.0.7"
    assert addresses.of(scope("10.1.2.3", forged_then_real)) == "203.0.113.5"


def test_an_unparsable_entry_stops_at_the_last_trusted_hop() -> None:
    addresses = ClientAddresses(parse_networks(["10.0.0.0/8"]))
    assert addresses.of(scope("10.1.2.3", "<script>alert(1)</script>")) == "10.1.2.3"
    assert addresses.of(scope("10.1.2.3", "203.0.113.5, 10.0.0.7, bogus")) == "10.1.2.3"
    assert addresses.of(scope("10.1.2.3", "1.2.3.4," * 200)) == "10.1.2.3"  # over the length bound
