"""rest.bind-port on real sockets: JobManagers sharing a range take a free port each and a full
range stops the start (the parsing rules are tests/unit/test_rest_ports.py)."""
from __future__ import annotations

import asyncio
import socket

import pytest

from millstream.runtime import config as cfg


def test_two_jobmanagers_with_one_range_take_a_port_each_and_a_full_range_stops_the_start() -> None:
    from millstream.jobmanager.jobmanager import JobManager
    from millstream.runtime.entrypoint.process import StartupError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        first = taken.getsockname()[1]  # taken: both must skip it
        conf = cfg.Configuration.from_dict({"jobmanager.rpc.address": "127.0.0.1", "jobmanager.rpc.port": "0",
                                            "rest.bind-port": f"{first}-{first + 30}"})

        async def main() -> None:
            async with JobManager(conf) as one, JobManager(conf) as two:
                ports = [int(jm.rest_url.rsplit(":", 1)[1]) for jm in (one, two)]
                assert first not in ports and len(set(ports)) == 2 and all(first < p <= first + 30 for p in ports)
            only_taken = cfg.Configuration.from_dict({**conf.to_dict(), "rest.bind-port": str(first)})
            with pytest.raises(StartupError, match=rf"rest.bind-port"):
                await JobManager(only_taken).start()

        asyncio.run(main())
