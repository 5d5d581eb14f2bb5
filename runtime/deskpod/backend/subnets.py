"""Slot networks from an operator-given address range instead of Docker's default pools (pure).

Docker gives each new bridge network a subnet from its default address pools
(``172.17.0.0/16`` to ``172.31.0.0/16`` and ``192.168.0.0/16`` in /20s: about 30
networks), so a pool of thirty slots, each with its own network, runs out. With
``subnet_pool`` (e.g. ``10.220.0.0/16``) and ``subnet_size`` (e.g. 28: 16 addresses,
a slot needs four) the backend picks, for each new slot network, the first subnet of
the range that overlaps no existing Docker network (:func:`pick_subnet`) and creates
the network with that IPAM configuration; 4096 slots fit in a /16 at /28.

Two creators racing for the same subnet (two pools, two processes) are settled by the
engine, which refuses an overlapping network; the backend then takes the next free one.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from deskpod.errors import BackendError

__all__ = ["pick_subnet", "used_subnets"]


def used_subnets(networks: Iterable[dict[str, object]]) -> list[ipaddress.IPv4Network]:
    """The IPv4 subnets of Docker networks as the engine lists them (``GET /networks``).

    Args:
        networks: the engine's network objects (``IPAM.Config[].Subnet``).

    Returns:
        Every IPv4 subnet found (IPv6 and malformed ones are skipped).
    """
    found = []
    for net in networks:
        ipam = net.get("IPAM") if isinstance(net, dict) else None
        configs = ipam.get("Config") if isinstance(ipam, dict) else None
        for config in configs or []:
            subnet = config.get("Subnet") if isinstance(config, dict) else None
            try:
                parsed = ipaddress.ip_network(str(subnet), strict=False)
            except ValueError:
                continue
            if isinstance(parsed, ipaddress.IPv4Network):
                found.append(parsed)
    return found


def pick_subnet(pool: str, prefix_len: int, used: Iterable[ipaddress.IPv4Network],
                skip: Iterable[str] = ()) -> str:
    """The first ``/prefix_len`` subnet of ``pool`` that overlaps none of ``used``.

    Args:
        pool: the range, CIDR (``"10.220.0.0/16"``).
        prefix_len: the subnet's prefix length, at least the range's.
        used: subnets taken already.
        skip: subnets (CIDR) not to pick, e.g. one the engine just refused.

    Returns:
        The subnet, CIDR (``"10.220.0.16/28"``).

    Raises:
        BackendError: the range is malformed or smaller than one subnet (``reason``
            ``"config"``), or every subnet of it is taken (``"subnets_exhausted"``).
    """
    try:
        network = ipaddress.IPv4Network(pool, strict=True)
    except ValueError as exc:
        raise BackendError(f"not an IPv4 address range: {pool!r}", detail={"reason": "config"}) from exc
    if prefix_len < network.prefixlen or prefix_len > 30:
        raise BackendError(f"subnet size /{prefix_len} does not fit in {pool}", detail={"reason": "config"})
    taken = list(used)
    skipped = set(skip)
    for candidate in network.subnets(new_prefix=prefix_len):
        if str(candidate) in skipped or any(candidate.overlaps(t) for t in taken):
            continue
        return str(candidate)
    raise BackendError(f"every /{prefix_len} subnet of {pool} is in use", detail={"reason": "subnets_exhausted"})
