"""A Ray cluster address given on the command line, checked before anything waits on it.

``ray.init`` on an address where nothing listens retries for minutes; a TCP connect answers in
seconds. Socket only: no Ray import here.
"""

from __future__ import annotations

import socket
from typing import Optional

from lipsweep.core.config_base import UsageError

RAY_CONNECT_TIMEOUT_S = 10.0


def parse_ray_address(addr: str, flag: str = "--ray-address") -> Optional[tuple[str, int]]:
    """(host, port) of an explicit address (``host:port`` or ``ray://host:port``); None for
    ``auto``/``local``. Raises UsageError naming ``flag`` if malformed."""
    if addr in ("auto", "local"):
        return None
    rest = addr.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"{flag} {addr!r}: expected HOST:PORT, ray://HOST:PORT or auto")
    return host, int(port)


def check_ray_address(
    addr: str, timeout_s: float = RAY_CONNECT_TIMEOUT_S, flag: str = "--ray-address"
) -> None:
    """Refuse an unreachable address within ``timeout_s`` (ray.init would hang)."""
    hp = parse_ray_address(addr, flag)
    if hp is None:
        return
    try:
        socket.create_connection(hp, timeout=timeout_s).close()
    except OSError as exc:
        raise UsageError(
            f"{flag} {addr}: cannot connect within {timeout_s:.0f} s ({exc})"
        ) from None
