"""The ``millstream`` command line."""
from __future__ import annotations

import argparse
import os
import runpy
import sys
from typing import Sequence

from millstream.client.execution import JobGraphCaptured, capture_job_graphs
from millstream.client.stream_graph import StreamGraphError


class CliError(Exception):
    pass


def load_job_graph(script: str, script_args: Sequence[str] = ()):
    """Runs a job script until its ``execute()`` and returns the JobGraph it would submit."""
    if not os.path.isfile(script):
        raise CliError(f"Job file not found: {script}")
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *script_args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        with capture_job_graphs():
            runpy.run_path(script, run_name="__main__")
    except JobGraphCaptured as captured:
        return captured.job_graph
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    raise CliError(f"{script} finished without calling execute(): it defines no job")


def _plan(args: argparse.Namespace) -> int:
    job_graph = load_job_graph(args.script, args.script_args)
    if args.format == "dot":
        print(job_graph.to_dot(), end="")
    elif args.format == "json":
        print(job_graph.to_json())
    else:
        print(f"Job: {job_graph.job_name}")
        names = {v.id: v.name for v in job_graph.vertices}
        for v in job_graph.vertices:
            print(f"  [{v.parallelism}] {v.name}  (slot sharing group: {v.slot_sharing_group})")
            for e in v.inputs:
                print(f"        <- {e.ship_strategy} from {names[e.source_vertex]}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="millstream", description="Millstream: Flink's architecture for Python.")
    sub = parser.add_subparsers(dest="command", required=True)
    plan = sub.add_parser(
        "plan", help="show the JobGraph a job script would submit (other arguments go to the script)"
    )
    plan.add_argument("script")
    fmt = plan.add_mutually_exclusive_group()
    fmt.add_argument("--json", dest="format", action="store_const", const="json")
    fmt.add_argument("--dot", dest="format", action="store_const", const="dot")
    plan.set_defaults(func=_plan, format="text")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "plan":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.script_args = extra  # everything the CLI does not know is the job script's
    try:
        return args.func(args)
    except (CliError, StreamGraphError) as exc:
        print(f"millstream: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
