"""Where a URL's host is, as orch compares it (PURE): one rule for "this machine".

Two checks ask it: whether a router's registered worker is one of the inventory's instances
(core.routerworkers) and whether a repro's literal URL reaches one of orch's servers
(core.reprourls). They had a loopback rule each, and the router's missed IPv4-mapped and
trailing-dot spellings of orch's own instances, which it would have called strangers. And
every message names a host and its port one way (host_port: IPv6 in brackets).
"""

from __future__ import annotations

import ipaddress
import re
import socket

LOOPBACK = "loopback"  # every address of this machine's loopback, and `localhost`, compare as one
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
DEFAULT_PORTS = {"http": 80, "https": 443}
# an IPv4 address as the C library's inet_aton reads it, and so the resolver curl and Python's
# sockets connect through: 1-4 parts, each decimal, 0x-hex or 0-octal (`127.1`, `2130706433`,
# `0x7f.1` and `0` are all this machine); matched whole, as inet_aton itself ignores what
# follows a blank
INET_ATON_FORM = re.compile(r"\A(?:0x[0-9a-f]*|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]+)){0,3}\Z")


def host_port(host: str, port: int | str | None) -> str:
    """`host:port`, an IPv6 address in brackets (`[2001:db8::2]:22`), as URLs, ssh and
    known_hosts write it: `2001:db8::2:22` reads as another address on no port. Without a port
    (None), the host alone as a URL writes it (`[2001:db8::2]`)."""
    server = f"[{host}]" if ":" in host else host
    return server if port is None else f"{server}:{port}"


def canonical_host(host: str) -> str:
    """A host name as compared: lower case, no trailing dot; an address in its one written form
    (`10.1` and `::ffff:10.0.0.1` are 10.0.0.1, `2001:0db8::0002` is 2001:db8::2), as a client
    connects to it whichever way it was written; every loopback address is LOOPBACK (127.0.0.0/8,
    ::1, 0.0.0.0 and :: which connect to this machine, in any of those forms), and so is every
    name under `.localhost`."""
    name = host.lower().rstrip(".")
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):  # RFC 6761: all of .localhost
        return LOOPBACK
    address = _address(name)
    if address is None:
        return name
    mapped = getattr(address, "ipv4_mapped", None)
    address = mapped if mapped is not None else address
    return LOOPBACK if address.is_loopback or address.is_unspecified else str(address)


def _address(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address `name` is written as, in any form a client would connect to it by; None for
    a name. A shorthand (`127.1`) read by inet_aton itself, not by a second parser that could
    differ from what the repro's client does with it."""
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        pass
    if not INET_ATON_FORM.match(name):
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(name))
    except OSError:  # a part out of range, or `08` (no octal digit)
        return None
