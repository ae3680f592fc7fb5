"""The ``millstream`` command line: plan, run and manage jobs; start and stop a local cluster."""
from __future__ import annotations

import argparse
import os
import runpy
import sys
import time
from typing import Sequence

import grpc

from millstream.client.execution import ENV_JOBMANAGER, JobGraphCaptured, capture_job_graphs
from millstream.client.stream_graph import StreamGraphError


class CliError(Exception):
    pass


def _run_script(script: str, script_args: Sequence[str]) -> None:
    if not os.path.isfile(script):
        raise CliError(f"Job file not found: {script}")
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *script_args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def load_job_graph(script: str, script_args: Sequence[str] = ()):  # noqa: ANN201
    """Runs a job script until its ``execute()`` and returns the JobGraph it would submit."""
    try:
        with capture_job_graphs():
            _run_script(script, script_args)
    except JobGraphCaptured as captured:
        return captured.job_graph
    raise CliError(f"{script} finished without calling execute(): it defines no job")


def jobmanager_address(explicit: str | None) -> str:
    from millstream.client.local_cluster import read_state
    from millstream.runtime import config as cfg

    if explicit:
        return explicit
    if os.environ.get(ENV_JOBMANAGER):
        return os.environ[ENV_JOBMANAGER]
    state = read_state()
    if state:
        return state["jobmanager"]
    c = cfg.load_configuration()
    return f"{c.get(cfg.JOBMANAGER_RPC_ADDRESS)}:{c.get(cfg.JOBMANAGER_RPC_PORT)}"


def _client(args: argparse.Namespace):  # noqa: ANN202
    from millstream.client.cluster_client import ClusterClient

    return ClusterClient(jobmanager_address(args.jobmanager))


def _job_id(text: str) -> bytes:
    try:
        job_id = bytes.fromhex(text)
    except ValueError:
        job_id = b""
    if len(job_id) != 16:
        raise CliError(f"Not a job id (32 hex characters): {text}")
    return job_id


def _format_summary(s) -> str:  # noqa: ANN001
    from millstream.jobmanager.execution_state import JobStatus

    status = JobStatus.from_proto(s.status).value
    tasks = ", ".join(f"{k} {v}" for k, v in sorted(s.tasks_per_state.items()))
    line = f"{s.job_id.hex()}  {status:<10}  {s.job_name}  [{tasks}]"
    if s.failure.message:
        line += f"\n    cause: {s.failure.message}"
    return line


# -- commands --------------------------------------------------------------------------------


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


def _run(args: argparse.Namespace) -> int:
    os.environ[ENV_JOBMANAGER] = jobmanager_address(args.jobmanager)
    _run_script(args.script, args.script_args)
    return 0


def _list(args: argparse.Namespace) -> int:
    with _client(args) as client:
        jobs = client.list_jobs()
    if not jobs:
        print("No jobs.")
    for summary in sorted(jobs, key=lambda s: s.start_time_ms):
        print(_format_summary(summary))
    return 0


def _status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        summary = client.status(_job_id(args.job_id))
    print(_format_summary(summary))
    if summary.failure.traceback:
        print(summary.failure.traceback)
    return 0


def _cancel(args: argparse.Namespace) -> int:
    from millstream.jobmanager.execution_state import JobStatus

    job_id = _job_id(args.job_id)
    with _client(args) as client:
        summary = client.cancel(job_id)
        deadline = time.monotonic() + args.timeout
        while not JobStatus.from_proto(summary.status).is_terminal() and time.monotonic() < deadline:
            time.sleep(0.2)
            summary = client.status(job_id)
    print(_format_summary(summary))
    return 0


def _cluster(args: argparse.Namespace) -> int:
    from millstream.client import local_cluster

    if args.action == "start":
        state = local_cluster.start(args.taskmanagers, args.slots, args.port, args.dynamic, args.config)
        print(f"Cluster started: JobManager at {state['jobmanager']}, {args.taskmanagers} TaskManagers "
              f"x {args.slots} slots; logs in {state['log_dir']}")
    elif args.action == "stop":
        print("Cluster stopped." if local_cluster.stop() else "No cluster is running.")
    else:
        with _client(args) as client:
            o = client.overview()
        print(f"TaskManagers: {o.taskmanagers}  slots: {o.slots_available}/{o.slots_total} free  "
              f"jobs: {o.jobs_running} running, {o.jobs_finished} finished, {o.jobs_failed} failed, {o.jobs_cancelled} cancelled")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="millstream", description="Millstream: Flink's architecture for Python.")
    sub = parser.add_subparsers(dest="command", required=True)

    plan = sub.add_parser("plan", help="show the JobGraph a job script would submit (other arguments go to the script)")
    plan.add_argument("script")
    fmt = plan.add_mutually_exclusive_group()
    fmt.add_argument("--json", dest="format", action="store_const", const="json")
    fmt.add_argument("--dot", dest="format", action="store_const", const="dot")
    plan.set_defaults(func=_plan, format="text")

    run = sub.add_parser("run", help="run a job script on the cluster and wait for its result")
    run.add_argument("script")
    run.set_defaults(func=_run)

    sub.add_parser("list", help="list the cluster's jobs").set_defaults(func=_list)
    status = sub.add_parser("status", help="show a job's status")
    status.add_argument("job_id")
    status.set_defaults(func=_status)
    cancel = sub.add_parser("cancel", help="cancel a job and wait until it stops")
    cancel.add_argument("job_id")
    cancel.add_argument("--timeout", type=float, default=30.0)
    cancel.set_defaults(func=_cancel)

    cluster = sub.add_parser("cluster", help="start, stop or inspect a local session cluster")
    cluster.add_argument("action", choices=["start", "stop", "status"])
    cluster.add_argument("--taskmanagers", type=int, default=1)
    cluster.add_argument("--slots", type=int, default=2)
    cluster.add_argument("--port", type=int, default=6123, help="JobManager port (0: any free port)")
    cluster.add_argument("--config", help="YAML configuration file")
    cluster.add_argument("-D", dest="dynamic", action="append", default=[], metavar="KEY=VALUE")
    cluster.set_defaults(func=_cluster)

    for name, target in (("jobmanager", "millstream.jobmanager.jobmanager"), ("taskmanager", "millstream.taskmanager.taskmanager")):
        p = sub.add_parser(name, help=f"run a {name} process in the foreground", add_help=False)
        p.set_defaults(func=None, target=target)

    for p in (run, sub.choices["list"], status, cancel, cluster):
        p.add_argument("--jobmanager", help="host:port of the JobManager (default: MILLSTREAM_JOBMANAGER, the local cluster, or config)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("jobmanager", "taskmanager"):
        import importlib

        importlib.import_module(f"millstream.{argv[0]}.{argv[0]}").main(argv[1:])
        return 0
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command not in ("plan", "run"):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.script_args = extra  # everything the CLI does not know is the job script's
    try:
        return args.func(args)
    except (CliError, StreamGraphError) as exc:
        print(f"millstream: error: {exc}", file=sys.stderr)
        return 2
    except grpc.RpcError as exc:
        print(f"millstream: error: {exc.code().name}: {exc.details()}", file=sys.stderr)  # type: ignore[attr-defined]
        return 1
    except Exception as exc:
        from millstream.client.execution import JobExecutionException
        from millstream.client.local_cluster import ClusterError

        if isinstance(exc, (JobExecutionException, ClusterError)):
            print(f"millstream: {exc}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
