"""A process's health over gRPC, for container health checks and scripts:

    python -m millstream.runtime.rpc.healthcheck HOST:PORT [--timeout SECONDS] [--config FILE] [-D KEY=VALUE]

Exit code 0 when the server at HOST:PORT reports SERVING (a JobManager that serves; a TaskManager
that is registered with a JobManager leader), 1 with the reason on stderr otherwise. With
``security.ssl.enabled`` (from --config, MILLSTREAM_CONFIG_FILE, MILLSTREAM_CONF_* or -D) the check
connects with TLS and the configured certificate; it needs no token (health checks are open).
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from millstream.runtime import config as cfg
from millstream.runtime.rpc.service import sync_channel
from millstream.runtime.rpc.security import Credentials
from millstream.runtime.rpc.tls import TlsSettings, tls_problem, tls_settings


def check(address: str, timeout_s: float = 3.0, tls: TlsSettings | None = None) -> str | None:
    """None when ``address`` reports SERVING, else why not."""
    with sync_channel(address, credentials=Credentials(tls)) as channel:
        try:
            # types-grpcio-health-checking's HealthStub declares no methods (the generated stub sets them in __init__)
            stub: Any = health_pb2_grpc.HealthStub(channel)
            response = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout_s)
        except grpc.RpcError as exc:
            details = exc.details() or ""
            return f"{address}: {exc.code().name} {tls_problem(details, tls is not None) or details}"
    if response.status != health_pb2.HealthCheckResponse.SERVING:
        return f"{address}: {health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m millstream.runtime.rpc.healthcheck", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("address", metavar="HOST:PORT")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the answer (default: 3)")
    parser.add_argument("--config", help="YAML configuration file (for security.ssl.*)")
    parser.add_argument("-D", dest="dynamic", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    try:
        tls = tls_settings(cfg.load_configuration(args.config, dynamic_properties=args.dynamic))
    except cfg.ConfigurationError as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    problem = check(args.address, args.timeout, tls)
    if problem is not None:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
