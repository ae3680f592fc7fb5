"""Which ports the REST API tries, in order: Flink's ``rest.bind-port`` (a port, a range, or a list of
both; the first free one wins) or else ``rest.port``. Pure; the JobManager binds."""
from __future__ import annotations

from millstream.runtime import config as cfg


def parse_bind_ports(text: str, key: str = "rest.bind-port") -> list[int]:
    """``"8081"``, ``"50100-50200"``, ``"50100,50102-50104"`` as the ports to try, in order."""
    ports: list[int] = []
    for part in text.split(","):
        first, sep, last = part.strip().partition("-")
        try:
            low, high = int(first), int(last) if sep else int(first)
        except ValueError:
            raise cfg.ConfigurationError(
                f"{key}: expected a port, a range such as 50100-50200 or a list of them, got {text!r}") from None
        if not 0 <= low <= high <= 65535:
            raise cfg.ConfigurationError(f"{key}: {part.strip()!r} is not a port or range within 0-65535 (first <= last)")
        ports.extend(p for p in range(low, high + 1) if p not in ports)
    return ports


def rest_ports(conf: cfg.Configuration) -> tuple[list[int], bool]:
    """The ports to try, and whether the user chose them (else the default 8081: a taken port then
    means no REST, with a warning, rather than a failed start)."""
    if cfg.REST_BIND_PORT in conf and (bind_port := conf.get(cfg.REST_BIND_PORT)):
        return parse_bind_ports(bind_port), True
    return [conf.get(cfg.REST_PORT)], cfg.REST_PORT in conf


def describe(ports: list[int]) -> str:
    """``8081`` or ``8081-8180`` (the ports tried, for messages)."""
    if len(ports) > 1 and ports == list(range(ports[0], ports[-1] + 1)):
        return f"{ports[0]}-{ports[-1]}"
    return ",".join(map(str, ports))
