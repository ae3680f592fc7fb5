"""What the JobManager and TaskManager processes share: arguments, logging, fatal errors, a clean stop."""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import Any, Callable, Coroutine

from millstream.runtime import config as cfg
from millstream.runtime.rpc.service import BindError

log = logging.getLogger(__name__)

# The first line of a fatal error on a process's stderr; `millstream cluster start` looks for it.
ERROR_PREFIX = "millstream {name}: error: "


class StartupError(RuntimeError):
    """A process cannot start as configured; the message says why, in one line."""


# What a process reports as one line and exit code 1 rather than a traceback: the user's to fix.
FATAL_ERRORS: tuple[type[BaseException], ...] = (BindError, StartupError, cfg.ConfigurationError)


def process_parser(prog: str) -> argparse.ArgumentParser:
    """A parser with the options every Millstream process takes: ``--config`` and ``-D key=value``."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--config", help="YAML configuration file")
    parser.add_argument("-D", dest="dynamic", action="append", default=[], metavar="KEY=VALUE")
    return parser


def start_process(args: argparse.Namespace, role: str | None = None) -> cfg.Configuration:
    """Sets up logging to stderr and loads the configuration named by the parsed arguments; with a
    ``role`` (``jobmanager``, ``taskmanager``) the process logs to its own rotated file too.

    A process reads registered options only: any other key is reported (with the closest option
    key, if one is close) rather than silently kept.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    configuration = cfg.load_configuration(args.config, dynamic_properties=args.dynamic)
    if role is not None:
        # lazy: only a JobManager's or TaskManager's process keeps log files; `cluster start` imports
        # this module too, and starts its processes sooner without them
        from millstream.runtime.entrypoint.log_files import install_process_log
        from millstream.runtime.entrypoint.log_hygiene import StdoutRotation, install_repeat_filter

        log.info("logging to %s", install_process_log(role, configuration).path)
        # a flood of one error (accept failures, refused calls) cannot fill the disk: repeats are
        # rate limited, and stdout (cluster start's <role>.log) is rotated as the log file is
        install_repeat_filter()
        raise_open_files_limit()
        StdoutRotation(configuration.get(cfg.LOG_FILE_MAX_SIZE), configuration.get(cfg.LOG_MAX_BACKUPS)).start()
    for key in configuration.user_keys():
        if cfg.closest_key(key) is None:  # near misses were reported as they were read
            log.warning("configuration key %r is not a Millstream option; this process ignores it%s",
                        key, cfg.did_you_mean(key))
    return configuration


def raise_open_files_limit(wanted: int = 65536) -> int:
    """Raises this process's soft limit of open files towards its hard limit (at most ``wanted``):
    the default soft limit (often 1024) is below what rest.max-connections and
    millstream.rpc.max-connections allow together. Returns the soft limit in force."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    except (ImportError, ValueError, OSError) as exc:
        log.warning("cannot raise the open files limit: %s", exc)
        return -1
    return int(soft)


def run_process(name: str, args: argparse.Namespace,
                serve: Callable[[cfg.Configuration], Coroutine[Any, Any, int | None]]) -> None:
    """Loads the configuration and runs ``serve(configuration)`` until it returns; its result is the
    exit code (None: 0).

    A bad configuration or a start-up failure (a taken port) is one line on stderr,
    ``millstream jobmanager: error: ...``, and exit code 1: ``cluster start`` relays that line.
    """
    try:
        code = asyncio.run(serve(start_process(args, name)))
    except FATAL_ERRORS as exc:
        print(ERROR_PREFIX.format(name=name) + str(exc), file=sys.stderr, flush=True)
        sys.exit(1)
    sys.exit(code or 0)


def write_ready_file(path: str, address: str) -> None:
    """Writes a process's address for whoever waits on ``path`` (``cluster start``), whole: the
    file appears only once its content is complete."""
    with open(f"{path}.tmp", "w") as f:
        f.write(address)
    os.replace(f"{path}.tmp", path)


async def until_terminated() -> None:
    """Returns on SIGTERM or SIGINT, so servers stop gracefully instead of dying mid-RPC."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
