"""The ``millstream`` command line: plan, run and manage jobs; start and stop a local cluster."""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import runpy
import sys
import time
import traceback
from typing import Any, Sequence

from millstream.runtime.clock import wall_ms

# lazy: gRPC, the job API and the graph code are imported where used: `cluster start` spawns its
# processes sooner without them.

EXIT_INTERRUPTED = 130  # a shell's code for "ended by Ctrl-C"
REACH_TIMEOUT_S = 2.0   # the CLI says "No JobManager at ..." within 3 s, start-up included


class CliError(Exception):
    pass


class UserProgramError(Exception):
    """The job script raised (or did not compile): carries the traceback of the user's frames only."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _internal_dirs() -> tuple[str, ...]:
    """The folders of Millstream's own packages, and runpy: frames there are not the user's."""
    import importlib.util

    dirs = [os.path.abspath(runpy.__file__ or "runpy.py"), os.path.abspath("<frozen runpy>")]
    for name in ("millstream", "millstream.client", "millstream.runtime", "millstream.jobmanager",
                 "millstream.taskmanager", "millstream.proto"):
        spec = importlib.util.find_spec(name)
        for location in (spec.submodule_search_locations or []) if spec else []:
            dirs.append(os.path.abspath(location) + os.sep)
    return tuple(dirs)


def user_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` with Millstream's and runpy's frames left out (chained exceptions too)."""
    internal = _internal_dirs()
    te = traceback.TracebackException.from_exception(exc)
    seen: set[int] = set()
    pending = [te]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        current.stack = traceback.StackSummary.from_list(
            [f for f in current.stack if not os.path.abspath(f.filename).startswith(internal)])
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return "".join(te.format())


def _run_script(script: str, script_args: Sequence[str]) -> None:
    """Runs a job script as ``__main__``; its own exceptions become :class:`UserProgramError`."""
    if not os.path.isfile(script):
        raise CliError(f"Job file not found: {script}")
    import grpc

    from millstream.client.execution import JobDetached, JobExecutionException, JobGraphCaptured

    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *script_args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except (JobGraphCaptured, JobDetached, JobExecutionException, SystemExit, KeyboardInterrupt):
        raise
    except Exception as exc:
        from millstream.client.cluster_client import JobManagerUnreachable, JobSubmissionError
        from millstream.client.execution import JobCancellationException

        if isinstance(exc, (JobManagerUnreachable, JobSubmissionError, JobCancellationException, grpc.RpcError)):
            raise  # Millstream's own errors on the way to the cluster: one message, not the program's fault
        raise UserProgramError(user_traceback(exc)) from None
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def load_job_graph(script: str, script_args: Sequence[str] = ()):  # noqa: ANN201
    """Runs a job script until its ``execute()`` and returns the JobGraph it would submit."""
    from millstream.client.execution import JobGraphCaptured, capture_job_graphs

    try:
        with capture_job_graphs():
            _run_script(script, script_args)
    except JobGraphCaptured as captured:
        return captured.job_graph
    raise CliError(f"{script} finished without calling execute(): it defines no job")


def jobmanager_address(explicit: str | None, configuration: Any = None) -> str:
    """Where the JobManager is without HA (one ``host:port``, or several comma-separated: the
    leader among them): --jobmanager, MILLSTREAM_JOBMANAGER, the local cluster, the configuration."""
    from millstream.client.execution import ENV_JOBMANAGER
    from millstream.client.session_cluster import read_state
    from millstream.runtime import config as cfg

    if explicit:
        return explicit
    if os.environ.get(ENV_JOBMANAGER):
        return os.environ[ENV_JOBMANAGER]
    state = read_state()
    if state:
        return state["jobmanager"]
    c = configuration if configuration is not None else cfg.load_configuration()
    return f"{c.get(cfg.JOBMANAGER_RPC_ADDRESS)}:{c.get(cfg.JOBMANAGER_RPC_PORT)}"


def _configuration(args: argparse.Namespace) -> Any:
    """The client's configuration: --config (or MILLSTREAM_CONFIG_FILE), the environment, -D."""
    from millstream.runtime import config as cfg

    return cfg.load_configuration(getattr(args, "config", None), dynamic_properties=getattr(args, "dynamic", []))


def _highly_available(configuration: Any) -> bool:
    from millstream.runtime import config as cfg

    return bool(configuration.get(cfg.HA_TYPE) == "ZOOKEEPER")


def _client(args: argparse.Namespace):  # noqa: ANN202
    """A client of the JobManager leader, checked to answer (else one line: JobManagerUnreachable,
    or NoJobManagerLeader naming where it looked)."""
    from millstream.client.cluster_client import ClusterClient, LeaderResolver

    configuration = _configuration(args)
    resolver = LeaderResolver.from_configuration(configuration, jobmanager_address(args.jobmanager, configuration))
    assert resolver is not None  # an address is always given
    client = ClusterClient(resolver=resolver)
    try:
        client.check_reachable(REACH_TIMEOUT_S)
    except BaseException:
        client.close()
        raise
    return client


def _job_id(text: str) -> bytes:
    try:
        job_id = bytes.fromhex(text)
    except ValueError:
        job_id = b""
    if len(job_id) != 16:
        raise CliError(f"Not a job id (32 hex characters): {text}")
    return job_id


# -- commands --------------------------------------------------------------------------------


def _plan(args: argparse.Namespace) -> int:
    # stdout is the plan only (`plan job.py --dot | dot -Tpng`): what the script prints goes to stderr
    with contextlib.redirect_stdout(sys.stderr):
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
    from millstream.client.execution import ENV_JOBMANAGER, JobDetached, observing
    from millstream.client.progress import LineAtomicWriter, RunView
    from millstream.runtime.config import ENV_CONFIG_FILE, ENV_PREFIX

    _refuse_cluster_options(args)
    configuration = _configuration(args)
    _client(args).close()  # nothing there, or no leader: one line now, not after the script's set-up
    # The script's execute() finds the cluster as this command did: the same -D and --config.
    if args.config:
        os.environ[ENV_CONFIG_FILE] = os.path.abspath(args.config)
    for key, value in _dynamic(args).items():
        os.environ[ENV_PREFIX + key.replace(".", "_").replace("-", "_").upper()] = value
    if not _highly_available(configuration):
        os.environ[ENV_JOBMANAGER] = jobmanager_address(args.jobmanager, configuration)
    if args.parallelism is not None:
        os.environ[f"{ENV_PREFIX}PARALLELISM_DEFAULT"] = str(args.parallelism)
    if args.from_savepoint:
        os.environ[f"{ENV_PREFIX}EXECUTION_SAVEPOINT_PATH"] = os.path.abspath(args.from_savepoint)
    if args.allow_non_restored_state:
        os.environ[f"{ENV_PREFIX}EXECUTION_SAVEPOINT_IGNORE_UNCLAIMED_STATE"] = "true"
    stdout = sys.stdout
    live = stdout.isatty()
    if not live:  # plain lines from two threads (the program's, the view's): never mixed
        sys.stdout = LineAtomicWriter(stdout)
    view = RunView(detached=args.detached, show_prints=not args.no_print, live=live, out=sys.stdout)
    try:
        with observing(view):
            _run_script(args.script, args.script_args)
        view.finish()
    except JobDetached:
        return 0
    except KeyboardInterrupt:
        view.stopped()
        return _interrupted(view, args)
    finally:
        view.stopped()
        sys.stdout.flush()
        sys.stdout = stdout
    return 0


def _run_application(args: argparse.Namespace) -> int:
    """``run-application``: this process becomes the application's JobManager (client/application.py)."""
    if not os.path.isfile(args.script):
        raise CliError(f"Job file not found: {args.script}")
    if args.taskmanagers < 0:
        raise CliError(f"--taskmanagers must be at least 0, got {args.taskmanagers}")
    if args.slots < 1:
        raise CliError(f"--slots must be at least 1, got {args.slots}")
    # lazy: the JobManager (the engine) loads for this command only
    from millstream.client.application import run_application
    from millstream.client.application_core import ApplicationError
    from millstream.runtime.entrypoint.process import FATAL_ERRORS

    try:
        return run_application(args, _run_script, UserProgramError)
    except ApplicationError as exc:
        raise CliError(str(exc)) from None
    except FATAL_ERRORS as exc:  # the JobManager cannot start as configured (a taken port): one line
        print(f"millstream run-application: error: {exc}", file=sys.stderr)
        return 1


def _refuse_cluster_options(args: argparse.Namespace) -> None:
    """`run -D` takes job-level options (they travel with the job) and client ones; a cluster's
    option (slots, ports, heartbeats, ...) would be silently ignored by a running cluster: refused.
    A key of no option is the job's own parameter: said so (with the closest option key)."""
    from millstream.runtime import config as cfg

    for key in _dynamic(args):
        if cfg.find_option(key) is None:
            print(f"millstream: warning: {key!r} (from -D) is no configuration option; the job gets it as a job "
                  f"parameter (RuntimeContext.get_job_parameter){cfg.did_you_mean(key)}", file=sys.stderr)
    refused = [key for key in _dynamic(args) if (option := cfg.find_option(key)) is not None
               and cfg.option_scope(option) == "cluster"]
    if refused:
        keys = ", ".join(refused)
        raise CliError(f"-D {keys}: {'a cluster option' if len(refused) == 1 else 'cluster options'}, not a job's; "
                       f"a running cluster does not change per job. Set {'it' if len(refused) == 1 else 'them'} "
                       "where the cluster starts (`millstream cluster start -D KEY=VALUE` or its configuration file).")


def _interrupted(view: Any, args: argparse.Namespace) -> int:
    """Ctrl-C under ``run``: the job keeps running (say how to cancel it), or is cancelled."""
    import grpc

    from millstream.client.cluster_client import JobManagerUnreachable
    from millstream.client.progress import is_terminal, status_name

    cancel = args.cancel_on_exit
    if view.job_id is None:
        print("millstream: interrupted before the job was submitted", file=sys.stderr)
        return EXIT_INTERRUPTED
    job = view.job_id.hex()
    try:
        client = _client(args)
    except JobManagerUnreachable as exc:
        print(f"job {job}: {exc}; it may keep running: `millstream cancel {job}`", file=sys.stderr)
        return EXIT_INTERRUPTED
    with client:
        try:
            summary = client.status(view.job_id)
            if is_terminal(summary):  # it ended, or the program's closed results cancelled it
                print(f"job {job} {status_name(summary)}", file=sys.stderr)
            elif cancel:
                client.cancel(view.job_id)
                print(f"job {job} cancelled", file=sys.stderr)
            else:
                print(f"job {job} keeps running; `millstream cancel {job}`", file=sys.stderr)
        except grpc.RpcError as exc:
            print(f"job {job}: the JobManager did not answer ({exc.code().name}); it may keep running: "
                  f"`millstream cancel {job}`", file=sys.stderr)
    return EXIT_INTERRUPTED


def _list(args: argparse.Namespace) -> int:
    from millstream.client.progress import list_rows, summary_json

    with _client(args) as client:
        jobs = client.list_jobs()
    now = wall_ms()
    if args.json:
        print(json.dumps([summary_json(s, now) for s in sorted(jobs, key=lambda s: s.start_time_ms, reverse=True)],
                         indent=2))
    elif not jobs:
        print("No jobs.")
    else:
        print("\n".join(list_rows(jobs, now)))
    return 0


def _status(args: argparse.Namespace) -> int:
    from millstream.client.progress import status_report, summary_json

    job_id = _job_id(args.job_id)
    with _client(args) as client:
        summary = client.status(job_id)
    if args.json:
        print(json.dumps(summary_json(summary, wall_ms()), indent=2))
    else:
        print("\n".join(status_report(summary, wall_ms())))
    return 0


def _cancel(args: argparse.Namespace) -> int:
    from millstream.client.progress import is_terminal, status_name

    job_id = _job_id(args.job_id)
    with _client(args) as client:
        summary = client.status(job_id)
        if is_terminal(summary):
            print(f"millstream: job {job_id.hex()} already {status_name(summary)}: nothing to cancel", file=sys.stderr)
            return 1
        summary = client.cancel(job_id)
        deadline = time.monotonic() + args.timeout
        while not is_terminal(summary) and time.monotonic() < deadline:
            time.sleep(0.2)
            summary = client.status(job_id)
    if not is_terminal(summary):
        print(f"millstream: job {job_id.hex()} is still {status_name(summary)} after {args.timeout:g} s", file=sys.stderr)
        return 1
    print(f"Job {summary.job_name} ({job_id.hex()}) {status_name(summary)}")
    return 0


def _savepoint(args: argparse.Namespace) -> int:
    if getattr(args, "dispose", None) is not None:
        return _dispose_savepoint(args)
    if args.job_id is None:
        print("millstream: savepoint needs JOB_ID (or --dispose PATH to delete a savepoint)", file=sys.stderr)
        return 2
    job_id = _job_id(args.job_id)
    target = os.path.abspath(args.directory) if args.directory else ""
    with _client(args) as client:
        path = client.savepoint(job_id, target, stop=args.command == "stop", timeout_s=args.timeout,
                                drain=getattr(args, "drain", False))
        if args.command == "stop":
            from millstream.client.progress import is_terminal

            deadline = time.monotonic() + args.timeout
            while not is_terminal(client.status(job_id)) and time.monotonic() < deadline:
                time.sleep(0.2)
    print(f"Savepoint completed. Path: {path}")
    if args.command == "stop":
        print(f"Job {job_id.hex()} stopped; resume it with `millstream run -s {path} JOB.py`")
    return 0


def _dispose_savepoint(args: argparse.Namespace) -> int:
    """``savepoint --dispose PATH`` (Flink's ``savepoint -d``): the JobManager deletes it."""
    if args.job_id is not None or args.directory is not None:
        print("millstream: savepoint --dispose PATH takes no JOB_ID or DIR", file=sys.stderr)
        return 2
    path = args.dispose if "://" in args.dispose else os.path.abspath(args.dispose)
    with _client(args) as client:
        deleted = client.dispose_savepoint(path, timeout_s=args.timeout)
    print(f"Savepoint '{deleted}' disposed.")
    return 0


def _checkpoint(args: argparse.Namespace) -> int:
    """``checkpoint JOB_ID [--full]`` (Flink's ``flink checkpoint``): a checkpoint now, its id printed."""
    job_id = _job_id(args.job_id)
    with _client(args) as client:
        checkpoint_id = client.checkpoint(job_id, full=args.full, timeout_s=args.timeout)
    print(f"Checkpoint{'(FULL)' if args.full else ''} {checkpoint_id} for job {job_id.hex()} completed.")
    return 0


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a subtask index (0, 1, ...), got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"subtasks count from 0, got {value}")
    return value


def _logs(args: argparse.Namespace) -> int:
    from millstream.client.progress import format_outputs

    job_id = _job_id(args.job_id)
    with _client(args) as client:
        response = client.task_outputs(job_id, args.vertex or "", args.subtask)
    if not response.subtasks:
        print(f"Job {job_id.hex()} ({response.job_name}) has no subtasks yet.")
        return 0
    for line in format_outputs(response):
        print(line)
    return 0


def _cluster(args: argparse.Namespace) -> int:
    from millstream.client import session_cluster

    if args.action == "start":
        _warn_unknown_keys(args.dynamic)
        ha_kwargs = {"ha": True} if args.ha else {}
        state = session_cluster.start(args.taskmanagers, args.slots, args.port, args.dynamic, args.config, **ha_kwargs)
        if args.ha:
            ha = state["ha"]
            standbys = [a for a in ha["jobmanagers"] if a != ha["leader"]]
            print(f"Cluster started with high availability: ZooKeeper at {ha['zookeeper']}, JobManager leader at "
                  f"{ha['leader']}, standby at {', '.join(standbys)}, {args.taskmanagers} TaskManagers x {args.slots} "
                  f"slots; logs in {state['log_dir']}")
            for address in [ha["leader"], *standbys]:
                print(f"  JobManager {address} ({'leader' if address == ha['leader'] else 'standby'}): "
                      f"{_web_ui(state, address)}")
            print("Clients find the leader with: " + " ".join(f"-D {o}" for o in ha["options"]))
        else:
            print(f"Cluster started: JobManager at {state['jobmanager']}, {args.taskmanagers} TaskManagers "
                  f"x {args.slots} slots; logs in {state['log_dir']}")
            print(f"  JobManager {state['jobmanager']}: {_web_ui(state, state['jobmanager'])}")
    elif args.action == "stop":
        print("Cluster stopped." if session_cluster.stop() else "No cluster is running.")
    else:
        with _client(args) as client:
            o = client.overview()
        print(f"TaskManagers: {o.taskmanagers}  slots: {o.slots_available}/{o.slots_total} free  "
              f"jobs: {o.jobs_running} running, {o.jobs_finished} finished, {o.jobs_failed} failed, {o.jobs_cancelled} cancelled")
    return 0


def _web_ui(state: dict[str, Any], address: str) -> str:
    """"web UI and REST API at URL", or why there is none."""
    url = state.get("rest", {}).get(address, "")
    if url:
        return f"web UI and REST API at {url}"
    return "no web UI (its REST port was taken; set -D rest.port=PORT, 0: any free port)"


def _dynamic(args: argparse.Namespace) -> dict[str, str]:
    from millstream.runtime import config as cfg

    return cfg.parse_dynamic_properties(getattr(args, "dynamic", []))


def _warn_unknown_keys(dynamic: list[str]) -> None:
    """The cluster's processes only log a -D key no option has; the user who typed it sees it here."""
    from millstream.runtime import config as cfg

    for key in cfg.parse_dynamic_properties(dynamic):
        if cfg.find_option(key) is None:
            print(f"millstream: warning: unknown configuration key {key!r} (from -D) is ignored{cfg.did_you_mean(key)}",
                  file=sys.stderr)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="millstream", description="Millstream: Flink's architecture for Python.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    plan = sub.add_parser("plan", help="show the JobGraph a job script would submit (other arguments go to the script)",
                          description="Runs JOB.py until its execute() and prints the JobGraph it would submit, without running the job.")
    plan.add_argument("script", metavar="JOB.py", help="the job script")
    fmt = plan.add_mutually_exclusive_group()
    fmt.add_argument("--json", dest="format", action="store_const", const="json", help="print the JobGraph as JSON")
    fmt.add_argument("--dot", dest="format", action="store_const", const="dot", help="print the JobGraph for Graphviz")
    plan.set_defaults(func=_plan, format="text")

    run = sub.add_parser(
        "run", help="run a job script on the cluster, showing its progress",
        description="Runs JOB.py with its jobs going to the cluster: prints each job's id at once, then (attached) "
                    "its progress and printed lines until it ends. Ctrl-C leaves the job running (see --cancel-on-exit).")
    run.add_argument("-d", "--detached", action="store_true", help="submit the job, print its id and return without waiting")
    run.add_argument("-p", "--parallelism", type=_positive_int, metavar="N",
                     help="the job's default parallelism (parallelism.default), for operators that set none")
    run.add_argument("--no-print", action="store_true", help="do not show the lines the job's print sinks write")
    run.add_argument("--cancel-on-exit", "-sae", action="store_true",
                     help="cancel the job when this command is interrupted (Ctrl-C) instead of leaving it running")
    run.add_argument("-s", "--from-savepoint", metavar="PATH", help="resume the job from this savepoint (execution.savepoint.path)")
    run.add_argument("--allow-non-restored-state", "-n", action="store_true",
                     help="resume even if the savepoint holds state of operators the job no longer has")
    run.add_argument("script", metavar="JOB.py", help="the job script")
    run.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments for the job script (after JOB.py, all go to it)")
    run.set_defaults(func=_run)

    p = sub.add_parser(
        "run-application", help="run a job script as an application: its own JobManager, exits with the job's status",
        description="Starts a JobManager (Dispatcher, ResourceManager, REST API) in this process and runs JOB.py's "
                    "main against it, as Flink's application mode: the process lives for the application and exits "
                    "0 when its jobs FINISHED, 1 when one FAILED (or the program failed), 3 when one was CANCELED. "
                    "TaskManagers join it as a session cluster's do (`millstream taskmanager --jobmanager HOST:PORT`); "
                    "--taskmanagers N starts N local ones. With high-availability.type=zookeeper, start it on several "
                    "hosts: a standby that takes over recovers the job and does not run the program again.")
    p.add_argument("--taskmanagers", type=int, default=0, metavar="N",
                   help="local TaskManager processes to start (default: 0, as Flink's standalone job cluster)")
    p.add_argument("--slots", type=int, default=2, metavar="N", help="task slots of each local TaskManager (default: 2)")
    p.add_argument("--job-id", metavar="HEX",
                   help="the job's fixed id (32 hex characters); with HA it defaults to one derived from "
                        "high-availability.cluster-id")
    p.add_argument("-p", "--parallelism", type=int, metavar="N",
                   help="the job's default parallelism (parallelism.default), for operators that set none")
    p.add_argument("--no-print", action="store_true", help="do not show the lines the job's print sinks write")
    p.add_argument("--config", help="YAML configuration file (the cluster's and the program's)")
    p.add_argument("-D", dest="dynamic", action="append", default=[], metavar="KEY=VALUE",
                   help="a configuration option of the cluster and the program, e.g. -D jobmanager.rpc.port=6123")
    p.add_argument("-v", "--verbose", action="count", default=0, help="show Millstream's log lines on stderr (-vv: debug)")
    p.add_argument("script", metavar="JOB.py", help="the job script")
    p.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments for the job script")
    p.set_defaults(func=_run_application)

    listing = sub.add_parser("list", help="list the cluster's jobs", description="Lists the cluster's jobs, oldest first.")
    listing.add_argument("--json", action="store_true", help="print the jobs as JSON")
    listing.set_defaults(func=_list)
    status = sub.add_parser("status", help="show a job's status, its vertices and the cause of a failure",
                            description="Shows a job's status, each vertex's task states and records, and the root cause of a failure.")
    status.add_argument("job_id", metavar="JOB_ID", help="the job's id (32 hex characters, as `millstream list` shows)")
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(func=_status)
    cancel = sub.add_parser("cancel", help="cancel a job and wait until it stops",
                            description="Cancels a running job and waits until it stopped; a job that already ended is an error.")
    cancel.add_argument("job_id", metavar="JOB_ID", help="the job's id (32 hex characters, as `millstream list` shows)")
    cancel.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the job to stop (default: 30)")
    cancel.set_defaults(func=_cancel)

    logs = sub.add_parser("logs", help="show what a job's subtasks printed and logged",
                          description="Shows what the job's user functions printed (stdout, stderr) and logged "
                                      "(Python logging), per subtask, as kept by the TaskManagers that ran them "
                                      "(their current or last attempt), fetched through the JobManager.")
    logs.add_argument("job_id", metavar="JOB_ID", help="the job's id (32 hex characters, as `millstream list` shows)")
    logs.add_argument("--vertex", metavar="NAME_OR_ID", help="only this vertex: its id, its name or a unique part of it")
    logs.add_argument("--subtask", type=_non_negative_int, metavar="N", help="only subtask N (counting from 0)")
    logs.set_defaults(func=_logs)

    savepoint = sub.add_parser("savepoint", help="take a savepoint of a running job",
                               description="Takes a savepoint of a running job (it needs checkpointing) into DIR "
                                           "(default: execution.checkpointing.savepoint-dir) and prints its path.")
    savepoint.add_argument("job_id", metavar="JOB_ID", nargs="?", help="the job's id")
    savepoint.add_argument("directory", metavar="DIR", nargs="?", help="the target directory, shared with the cluster")
    savepoint.add_argument("--dispose", "-d", metavar="PATH",
                           help="instead: delete the savepoint at PATH (its directory; the JobManager checks its "
                                "metadata first and deletes nothing else)")
    stop = sub.add_parser("stop", help="take a savepoint of a running job, then stop it",
                          description="Stops the job with a synchronous savepoint: its sources stop after the "
                                      "savepoint's barrier, its sinks commit when the savepoint completes, its tasks "
                                      "end FINISHED; resume it with `run -s PATH`.")
    stop.add_argument("job_id", metavar="JOB_ID", help="the job's id")
    stop.add_argument("--savepoint-path", "-p", dest="directory", metavar="DIR", help="the target directory")
    stop.add_argument("--drain", "-d", action="store_true",
                      help="end the input first (MAX_WATERMARK: every event-time timer and window fires) before "
                           "the savepoint; for a job that is not resumed")
    for p in (savepoint, stop):
        p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the savepoint (default: 600)")
        p.set_defaults(func=_savepoint)
    checkpoint = sub.add_parser("checkpoint", help="take a checkpoint of a running job now",
                                description="Takes a checkpoint of a running job (it needs checkpointing) now, "
                                            "besides the periodic ones, and prints its id once it is complete.")
    checkpoint.add_argument("job_id", metavar="JOB_ID", help="the job's id")
    checkpoint.add_argument("--full", action="store_true",
                            help="a full checkpoint (Flink's -full): keyed state written whole, also by a job "
                                 "with incremental RocksDB checkpoints")
    checkpoint.add_argument("--timeout", type=float, default=600.0,
                            help="seconds to wait for the checkpoint (default: 600)")
    checkpoint.set_defaults(func=_checkpoint)

    cluster = sub.add_parser("cluster", help="start, stop or inspect a local session cluster",
                             description="A session cluster of local processes; state and logs in MILLSTREAM_CLUSTER_DIR "
                                         "(default ~/.millstream/cluster). `stop` also stops TaskManagers added with `millstream taskmanager`.")
    cluster.add_argument("action", choices=["start", "stop", "status"], help="start a cluster, stop it, or show its TaskManagers, slots and jobs")
    cluster.add_argument("--taskmanagers", type=int, default=1, help="TaskManager processes to start (default: 1)")
    cluster.add_argument("--slots", type=int, default=2, help="task slots per TaskManager (default: 2)")
    cluster.add_argument("--port", type=int, default=6123, help="JobManager port (0: any free port; with --ha the standby "
                         "takes the next one)")
    cluster.add_argument("--ha", action="store_true", help="high availability: start a local ZooKeeper, a leader and a "
                         "standby JobManager (Debian's zookeeper package and Java needed)")
    cluster.add_argument("--config", help="YAML configuration file")
    cluster.add_argument("-D", dest="dynamic", action="append", default=[], metavar="KEY=VALUE", help="a configuration option, e.g. -D heartbeat.timeout=10s")
    cluster.set_defaults(func=_cluster)

    for name, what in (("jobmanager", "a JobManager"), ("taskmanager", "a TaskManager (--jobmanager HOST:PORT adds it to a running cluster)")):
        p = sub.add_parser(name, help=f"run {what} in the foreground (see `millstream {name} --help`)", add_help=False)
        p.set_defaults(func=None)

    for p in (plan, run, listing, status, cancel, logs, savepoint, stop, checkpoint, cluster):
        p.add_argument("-v", "--verbose", action="count", default=0, help="show Millstream's log lines on stderr (-vv: debug)")
    for p in (run, listing, status, cancel, logs, savepoint, stop, checkpoint, cluster):
        p.add_argument("--jobmanager", metavar="HOST:PORT",
                       help="the JobManager, or several as HOST:PORT,HOST:PORT (the leader among them is used; default: "
                            "MILLSTREAM_JOBMANAGER, the local cluster, or the configuration); with "
                            "high-availability.type=zookeeper the leader is looked up in ZooKeeper instead")
    for p in (run, listing, status, cancel, logs, savepoint, stop, checkpoint):
        p.add_argument("--config", help="YAML configuration file (e.g. the cluster's, for its high-availability.* options)")
        p.add_argument("-D", dest="dynamic", action="append", default=[], metavar="KEY=VALUE",
                       help="a configuration option, e.g. -D high-availability.type=zookeeper "
                            "-D high-availability.zookeeper.quorum=zk:2181 -D high-availability.storageDir=/shared/ha")
    return parser


def _run_foreground_process(argv: list[str]) -> int:
    import importlib

    if argv[0] == "taskmanager":
        from millstream.client.session_cluster import register_added_taskmanager

        register_added_taskmanager(_option_value(argv[1:], "--jobmanager"))
    # The TaskManager's launcher forks Spark's JVM before it imports the TaskManager itself.
    module = "millstream.taskmanager.launcher" if argv[0] == "taskmanager" else f"millstream.{argv[0]}.{argv[0]}"
    importlib.import_module(module).main(argv[1:])
    return 0


def _option_value(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # whoever read our stdout left early (`millstream list --json | head`): stop quietly, as
        # Python's documentation advises, and keep the interpreter's final flush from failing too
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("jobmanager", "taskmanager"):
        return _run_foreground_process(argv)
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "plan":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "plan":
        args.script_args = extra  # everything the CLI does not know is the job script's
    import grpc

    from millstream.client.cluster_client import JobManagerUnreachable
    from millstream.client.logs import console_level, new_log_file, route_internal_logs
    from millstream.runtime.config import ConfigurationError

    try:
        level = console_level(args.verbose)
        if args.command == "run-application":  # this process is the JobManager: its lines go to a file
            route_internal_logs(new_log_file("application") if level is None else None,
                                logging.ERROR if level is None else level)
        elif args.command == "run":  # the program's client-side log lines: a file, not its console;
            # its warnings (a misspelled configuration key, a setting recorded but not acted on) are
            # the user's business and reach stderr too
            route_internal_logs(new_log_file("client") if level is None else None,
                                logging.WARNING if level is None else level)
        elif level is not None:
            route_internal_logs(None, level)
        else:  # a ZooKeeper look-up's connection chatter is not the command's output (-v shows it)
            for name in ("kazoo", "millstream.runtime.ha"):
                logging.getLogger(name).addHandler(logging.NullHandler())
                logging.getLogger(name).propagate = False
        return args.func(args)
    except JobManagerUnreachable as exc:
        print(exc, file=sys.stderr)
        return 1
    except UserProgramError as exc:
        print(exc.text, end="", file=sys.stderr)
        return 1
    except CliError as exc:
        print(f"millstream: error: {exc}", file=sys.stderr)
        return 2
    except ConfigurationError as exc:
        print(f"millstream: error: {exc}", file=sys.stderr)
        return 1
    except grpc.RpcError as exc:
        code = exc.code()
        # the JobManager's own refusals are its message; a transport failure keeps gRPC's status name
        plain = code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION)
        print(f"millstream: error: {'' if plain else code.name + ': '}{exc.details()}", file=sys.stderr)
        return 1
    except Exception as exc:
        from millstream.client.stream_graph import StreamGraphError  # the job API: imported here, on errors only

        if isinstance(exc, StreamGraphError):
            print(f"millstream: error: {exc}", file=sys.stderr)
            return 2
        from millstream.client.cluster_client import JobSubmissionError
        from millstream.client.execution import JobCancellationException, JobExecutionException
        from millstream.client.session_cluster import ClusterError

        if isinstance(exc, (JobExecutionException, JobSubmissionError, JobCancellationException, ClusterError)):
            print(f"millstream: {exc}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
