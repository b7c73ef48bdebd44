"""Where a URL's host is, as orch compares it (PURE): one rule for "this machine".

Two checks ask it: whether a router's registered worker is one of the inventory's instances
(core.routerworkers) and whether a repro's literal URL reaches one of orch's servers
(core.reprourls). They had a loopback rule each, and the router's missed IPv4-mapped and
trailing-dot spellings of orch's own instances, which it would have called strangers. And
every message names a host and its port one way (host_port: IPv6 in brackets).
"""

from __future__ import annotations

import ipaddress

LOOPBACK = "loopback"  # every address of this machine's loopback, and `localhost`, compare as one
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
DEFAULT_PORTS = {"http": 80, "https": 443}


def host_port(host: str, port: int | str) -> str:
    """`host:port`, an IPv6 address in brackets (`[2001:db8::2]:22`), as URLs, ssh and
    known_hosts write it: `2001:db8::2:22` reads as another address on no port."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def canonical_host(host: str) -> str:
    """A host name as compared: lower case, no trailing dot; every loopback address is LOOPBACK
    (127.0.0.0/8, ::1, 0.0.0.0 and :: which connect to this machine, an IPv4-mapped one)."""
    name = host.lower().rstrip(".")
    if name in LOOPBACK_NAMES:
        return LOOPBACK
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return name
    mapped = getattr(address, "ipv4_mapped", None)
    address = mapped if mapped is not None else address
    return LOOPBACK if address.is_loopback or address.is_unspecified else name
