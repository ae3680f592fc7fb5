"""``millstream run-application JOB.py [ARGS]``: an application cluster (Flink's application mode,
its standalone job cluster).

This process is the cluster's JobManager (Dispatcher, ResourceManager, REST API and web UI, on an
event loop of its own thread) and runs the program's ``main`` itself, in its main thread: the
program's ``execute()`` submits to this JobManager. The process owns the application: once the
program returned and every job it submitted ended, it stops its TaskManagers and its JobManager and
exits with the application's status (0: every job FINISHED; 1: a job FAILED or the program failed;
3: a job was CANCELED), the cause on stderr.

TaskManagers: none by default, as Flink's standalone job cluster; they join as they join a session
cluster (``millstream taskmanager --jobmanager HOST:PORT``, or with HA through ZooKeeper), or
``--taskmanagers N`` starts N local ones as child processes that end with this one.

High availability (``high-availability.type: zookeeper``): start the same command twice (or
more); one process leads and runs the application, the others wait as standbys. The job's id is
fixed (client/application_core.py), so a standby that takes over after the leader died finds the
job in HA storage, recovers it from its latest checkpoint and follows it to its end: the program's
``main`` is not run again. A process that becomes leader after the job ended reports its recorded
status and exits with it.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import threading
from concurrent.futures import Future
from typing import Any, Optional, TextIO, cast

from millstream.client.application_core import (
    ApplicationError,
    ApplicationJobs,
    JobOutcome,
    Outcome,
    Start,
    StartKind,
    application_job_id,
    decide_start,
    outcome,
    parse_job_id,
)
from millstream.client.cluster_client import ClusterClient, LeaderResolver
from millstream.client.execution import JobExecutionException, observing, running_application
from millstream.client.progress import LineAtomicWriter, RunView
from millstream.jobmanager.jobmanager import JobManager
from millstream.runtime import config as cfg
from millstream.runtime.entrypoint.children import spawn_child, stop_children
from millstream.runtime.entrypoint.log_files import configured_log_dir
from millstream.runtime.execution_state import JobStatus
from millstream.runtime.rpc.security import client_credentials

log = logging.getLogger(__name__)

STANDBY_NOTICE_S = 2.0  # a JobManager that does not lead by then says it waits as a standby
CLEANUP_WAIT_S = 30.0   # at most this long for the HA cleanup of the ended jobs before stopping


class ApplicationJobManager:
    """A JobManager on an event loop of its own thread, in this process."""

    def __init__(self, configuration: cfg.Configuration) -> None:
        self.config = configuration
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="millstream-application-jm", daemon=True)
        self.jm: Any = None

    def call(self, coro: Any, timeout: Optional[float] = None) -> Any:
        future: Future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout)

    def start(self) -> "ApplicationJobManager":
        self._thread.start()
        try:
            self.jm = self.call(JobManager(self.config, rest=True).start())
        except BaseException:
            self.stop()
            raise
        return self

    def wait_leading(self, timeout_s: float) -> bool:
        async def leading() -> bool:
            try:
                await asyncio.wait_for(self.jm.leading.wait(), timeout_s)
                return True
            except asyncio.TimeoutError:
                return False

        return bool(self.call(leading()))

    def stop(self) -> None:
        if self.jm is not None:
            try:
                self.call(self.jm.dispatcher.cleanups_done(CLEANUP_WAIT_S), CLEANUP_WAIT_S + 5)
                self.call(self.jm.stop(), 60)
            except Exception as exc:  # best effort: the process ends anyway
                log.warning("stopping the application's JobManager: %s", exc)
            self.jm = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)


def _say(text: str) -> None:
    print(f"millstream run-application: {text}", file=sys.stderr, flush=True)


def _taskmanager_args(args: argparse.Namespace, address: str, highly_available: bool) -> list[str]:
    common = (["--config", args.config] if args.config else []) + [f"-D{d}" for d in args.dynamic]
    target = [] if highly_available else ["--jobmanager", address]
    return ["-m", "millstream.taskmanager.launcher", *target, *common, f"-Dtaskmanager.numberOfTaskSlots={args.slots}"]


def _program_environment(args: argparse.Namespace, address: str) -> dict[str, Optional[str]]:
    """The variables the program's ``execute()`` reads (this JobManager, the same configuration);
    returns the values they replace."""
    wanted = {cfg.ENV_JOBMANAGER: address}
    if args.config:
        wanted[cfg.ENV_CONFIG_FILE] = os.path.abspath(args.config)
    for key, value in cfg.parse_dynamic_properties(args.dynamic).items():
        wanted[cfg.ENV_PREFIX + key.replace(".", "_").replace("-", "_").upper()] = value
    if args.parallelism is not None:
        wanted[f"{cfg.ENV_PREFIX}PARALLELISM_DEFAULT"] = str(args.parallelism)
    saved = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    return saved


def _restore(saved: dict[str, Optional[str]]) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _recorded_result(jm: Any, job_id: bytes) -> tuple[Optional[str], str]:
    """The job's status and failure in the JobResultStore (None: no entry)."""
    store = jm.ha.job_result_store()
    if not store.has_job_result_entry(job_id):
        return None, ""
    reader = getattr(store, "clean_result", None)
    if reader is None:
        return "FINISHED", ""  # pragma: no cover - only HA's file store keeps results across processes
    entry = reader(job_id)
    return entry.status.value, entry.failure


def _final(client: Any, job_id: bytes, view: Any = None) -> JobOutcome:
    """Follows the job to its end (``view``: shows its progress and printed lines)."""
    summary = None
    for update in client.wait(job_id):
        summary = update.summary
        if view is not None:
            view.update(update)
    if view is not None:
        view.stopped()
    assert summary is not None, "the JobManager closed the job's status stream without a status"
    return JobOutcome(job_id, summary.job_name, JobStatus.from_proto(summary.status).value, summary.failure.message)


def run_application(args: argparse.Namespace, run_script: Any, program_error: type[Exception]) -> int:
    """The command's body; client/cli.py parsed and checked its arguments and hands in how it runs
    a job script (``run_script(script, args)``, raising ``program_error`` with the user's traceback)."""
    configuration = cfg.load_configuration(args.config, dynamic_properties=args.dynamic)
    highly_available = configuration.get(cfg.HA_TYPE) == "ZOOKEEPER"
    explicit = parse_job_id(args.job_id) if args.job_id else None
    fixed_job_id = application_job_id(explicit, highly_available, configuration.get(cfg.HA_CLUSTER_ID))

    cluster = ApplicationJobManager(configuration).start()
    children: list[Any] = []
    saved_env: dict[str, Optional[str]] = {}
    try:
        jm = cluster.jm
        print(f"Application cluster: JobManager at {jm.address}" + (f", web UI at {jm.rest_url}" if jm.rest_url else ""),
              file=sys.stderr, flush=True)
        if args.taskmanagers:
            directory = configured_log_dir(configuration)
            os.makedirs(directory, exist_ok=True)
            for i in range(args.taskmanagers):
                path = os.path.join(directory, f"application-{os.getpid()}-taskmanager-{i}.out")
                children.append(spawn_child(_taskmanager_args(args, jm.address, highly_available), path))
            print(f"Started {args.taskmanagers} local TaskManager(s) with {args.slots} slot(s) each (output: "
                  f"{directory}/application-{os.getpid()}-taskmanager-*.out)", file=sys.stderr, flush=True)
        elif configuration.get(cfg.RESOURCEMANAGER_TYPE) != "standalone":
            print(f"TaskManagers start on demand (resourcemanager.type: {configuration.get(cfg.RESOURCEMANAGER_TYPE)})",
                  file=sys.stderr, flush=True)
        else:
            print(f"No TaskManagers of its own: start them with `millstream taskmanager --jobmanager {jm.address}`"
                  + (" (with the same high-availability options)" if highly_available else ""), file=sys.stderr, flush=True)
        if not cluster.wait_leading(STANDBY_NOTICE_S):
            print("Another JobManager leads this application: waiting as a standby", file=sys.stderr, flush=True)
            while not cluster.wait_leading(1.0):
                if jm.fatal_error is not None:
                    raise ApplicationError(f"the JobManager cannot go on: {jm.fatal_error}")
        recovered = fixed_job_id is not None and fixed_job_id in jm.dispatcher.jobs
        status, failure = (None, "")
        if fixed_job_id is not None and highly_available and not recovered:
            status, failure = cluster.call(asyncio.to_thread(_recorded_result, jm, fixed_job_id), 60)
        start = decide_start(fixed_job_id, recovered, status, failure)
        resolver = LeaderResolver.from_configuration(configuration, jm.address)
        stdout = sys.stdout
        live = stdout.isatty()
        # plain lines from two threads (the program's, the view's) never mix, as under `millstream run`
        out = stdout if live else cast(TextIO, LineAtomicWriter(stdout))
        view = RunView(show_prints=not args.no_print, live=live, out=out)
        with ClusterClient(resolver=resolver, credentials=client_credentials(configuration)) as client:
            if start.kind is StartKind.ENDED:
                result = _ended(start, configuration)
            elif start.kind is StartKind.FOLLOW:
                assert start.job_id is not None
                print(f"Job {start.job_id.hex()} of this application was recovered from high-availability storage: "
                      "following it (the program is not run again)", file=sys.stderr, flush=True)
                result = outcome([_final(client, start.job_id, view)])
            else:
                saved_env = _program_environment(args, jm.address)
                result = _run_program(args, fixed_job_id, client, view, run_script, program_error)
        _report(result)
        return result.exit_code
    except KeyboardInterrupt:
        _say("interrupted: stopping the application cluster")
        return 130
    finally:
        _restore(saved_env)
        stop_children(children)
        cluster.stop()


def _ended(start: Start, configuration: cfg.Configuration) -> Outcome:
    assert start.job_id is not None
    code = outcome([JobOutcome(start.job_id, "", start.status)]).exit_code
    note = (f"job {start.job_id.hex()} of this application already ended {start.status} (recorded in "
            f"high-availability storage, cluster id {configuration.get(cfg.HA_CLUSTER_ID)!r}); it is not run again. "
            "To run the application anew, give it another high-availability.cluster-id or --job-id.")
    return Outcome(code, [note, *([f"Its failure: {start.failure}"] if start.failure else [])])


def _run_program(args: argparse.Namespace, fixed_job_id: Optional[bytes], client: Any, view: Any, run_script: Any,
                 user_program_error: type[Exception]) -> Outcome:
    """Runs the program's ``main``, then waits for every job it submitted (``execute_async`` ones
    may still run); a program that failed has its running jobs cancelled (Flink: the application
    failed, its cluster shuts down)."""
    jobs = ApplicationJobs(fixed_job_id)
    program_error: Optional[str] = None
    job_failure: Optional[str] = None
    stdout = sys.stdout
    sys.stdout = view.out
    try:
        with running_application(jobs), observing(view):
            run_script(args.script, args.script_args)
        view.finish()
    except user_program_error as exc:
        program_error = str(getattr(exc, "text", exc))
    except JobExecutionException as exc:
        job_failure = str(exc)  # the job's own outcome says how it ended; its traceback goes with it
    except ApplicationError as exc:
        program_error = str(exc)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            program_error = f"the program exited with {exc.code}"
    finally:
        view.stopped()
        sys.stdout.flush()
        sys.stdout = stdout
    ended = []
    for job_id in jobs.submitted:
        if program_error is not None:
            try:
                client.cancel(job_id)
            except Exception:  # it ended meanwhile
                pass
        ended.append(_final(client, job_id))
    result = outcome(ended, program_error)
    if job_failure and result.exit_code != 0:
        return Outcome(result.exit_code, [*result.lines, "", job_failure])
    return result


def _report(result: Outcome) -> None:
    if result.exit_code != 0:
        _say(f"the application did not finish (exit code {result.exit_code}):")
    for line in result.lines:
        print(line, file=sys.stderr)
    sys.stderr.flush()
