"""What the JobManager and TaskManager processes share: arguments, logging, and a clean stop."""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from millstream.runtime import config as cfg


def process_parser(prog: str) -> argparse.ArgumentParser:
    """A parser with the options every Millstream process takes: ``--config`` and ``-D key=value``."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--config", help="YAML configuration file")
    parser.add_argument("-D", dest="dynamic", action="append", default=[], metavar="KEY=VALUE")
    return parser


def start_process(args: argparse.Namespace) -> cfg.Configuration:
    """Sets up logging to stderr and loads the configuration named by the parsed arguments."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    return cfg.load_configuration(args.config, dynamic_properties=args.dynamic)


async def until_terminated() -> None:
    """Returns on SIGTERM or SIGINT, so servers stop gracefully instead of dying mid-RPC."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
