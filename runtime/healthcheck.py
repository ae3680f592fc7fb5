"""A process's health over gRPC, for container health checks and scripts:

    python -m millstream.runtime.healthcheck HOST:PORT [--timeout SECONDS]

Exit code 0 when the server at HOST:PORT reports SERVING (a JobManager that serves; a TaskManager
that is registered with a JobManager leader), 1 with the reason on stderr otherwise.
"""
from __future__ import annotations

import argparse
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def check(address: str, timeout_s: float = 3.0) -> str | None:
    """None when ``address`` reports SERVING, else why not."""
    with grpc.insecure_channel(address) as channel:
        try:
            response = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""),
                                                                 timeout=timeout_s)
        except grpc.RpcError as exc:
            return f"{address}: {exc.code().name} {exc.details()}"  # type: ignore[attr-defined]
    if response.status != health_pb2.HealthCheckResponse.SERVING:
        return f"{address}: {health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m millstream.runtime.healthcheck", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("address", metavar="HOST:PORT")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the answer (default: 3)")
    args = parser.parse_args(argv)
    problem = check(args.address, args.timeout)
    if problem is not None:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
