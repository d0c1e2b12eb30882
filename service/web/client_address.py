"""The client's IP address, the one source for sign-in throttling and audit rows.

The TCP peer is the client unless it is one of the configured proxies (`TRUSTED_PROXIES`); then
`X-Forwarded-For` is read from the right, skipping further trusted proxies, and the first address
that is not one of them is the client. An entry that does not parse as an IP address ends the walk
at the last trusted hop, so a forged or garbled header can never put arbitrary text in an audit row.
"""

from __future__ import annotations

from collections.abc import Iterable
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

from starlette.types import Scope

IPNetwork = IPv4Network | IPv6Network
IPAddress = IPv4Address | IPv6Address

FORWARDED_FOR_HEADER = b"x-forwarded-for"
# Longer headers are ignored whole: a proxy chain has a handful of hops, not kilobytes of them.
MAX_FORWARDED_FOR_BYTES = 1024


def parse_networks(values: Iterable[str]) -> tuple[IPNetwork, ...]:
    """`TRUSTED_PROXIES` entries (addresses or CIDR ranges) as networks; raises ValueError on a bad one."""
    return tuple(ip_network(value.strip(), strict=False) for value in values)


def parse_address(value: str) -> IPAddress | None:
    try:
        return ip_address(value.strip())
    except ValueError:
        return None


class ClientAddresses:
    """Works out a request's client IP from its scope, trusting `X-Forwarded-For` only from `trusted`."""

    def __init__(self, trusted: Iterable[IPNetwork]) -> None:
        self._trusted = tuple(trusted)

    def _is_trusted(self, address: IPAddress) -> bool:
        return any(address in network for network in self._trusted)

    def of(self, scope: Scope) -> str | None:
        client = scope.get("client")
        peer = parse_address(client[0]) if client else None
        if peer is None:
            return None
        if not self._trusted or not self._is_trusted(peer):
            return str(peer)
        header = b",".join(value for name, value in scope.get("headers", ()) if name == FORWARDED_FOR_HEADER)
        if not header or len(header) > MAX_FORWARDED_FOR_BYTES:
            return str(peer)
        nearest = peer
        for entry in reversed(header.decode("latin-1").split(",")):
            hop = parse_address(entry)
            if hop is None:
                break
            nearest = hop
            if not self._is_trusted(hop):
                break
        return str(nearest)
