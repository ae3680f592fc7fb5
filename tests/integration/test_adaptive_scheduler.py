"""The adaptive scheduler and reactive mode on a real cluster (JobManager and TaskManager
processes, gRPC, Spark, files), as Flink documents them: a job starts with the slots there are,
a TaskManager that joins makes it rescale up from its latest checkpoint within the resource
stabilization timeout, and in reactive mode a TaskManager killed with -9 makes it scale down; its
keyed counts stay exact and its FileSink output holds every record exactly once through every
rescale and a stop-with-savepoint.

The tests are event-driven, not timed: the counting job's source is slow (rate-limited) only
until the test has seen what it waits for; then the test stops the job with a savepoint
(stop-with-savepoint under the adaptive scheduler) and resumes it from that savepoint at full
speed to its end, so each test lasts as long as its rescales, not as long as a slow source."""
from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.common import Configuration
from millstream.common.restart_strategy import RestartStrategies
from millstream.datastream import StreamExecutionEnvironment
from millstream.runtime.execution_state import JobStatus

from .harness import ancestors, poll_for, ProcessCluster, Rest
from .jobs import assert_exactly_once, ended, NotePid, visible_lines
from .test_checkpoints import counting_job

pytestmark = pytest.mark.timeout(300)

COUNT = 20_000  # at SLOW records/s the job would run for minutes: it is stopped long before
SLOW = 100
STABILIZATION_S = 1


def running_parallelism(client: ClusterClient, job_id: bytes) -> set[int] | None:
    """Every vertex's parallelism once all its current tasks run (None before, or while
    restarting). Every source subtask runs too: after a scale-up the generator's unread indices
    are spread over all of them, none is left without a split to finish at once."""
    summary = client.status(job_id)
    assert not JobStatus.from_proto(summary.status).is_terminal(), summary.failure.message
    vertices = list(summary.vertices)
    if not vertices or any(set(v.tasks_per_state) != {"RUNNING"} or v.tasks_per_state["RUNNING"] != v.parallelism
                           for v in vertices):
        return None
    return {v.parallelism for v in vertices}


def counting_graph(name: str, out: Path, parallelism: int, rate: float | None, savepoint: str | None = None,
                   *functions: Any, restarts: Any = None) -> Any:
    conf = Configuration()
    if savepoint:
        conf.set_string("execution.savepoint.path", savepoint)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    env.enable_checkpointing(300)
    if restarts is not None:
        env.set_restart_strategy(restarts)
    counting_job(env, out, COUNT, rate, *functions)
    return env.get_job_graph(name).proto


def join_and_rescale(cluster: ProcessCluster, client: ClusterClient, job_id: bytes, expected: set[int]) -> float:
    """Starts a TaskManager and returns the seconds from its registration to the job running at
    ``expected``, within the issue's bound: the stabilization timeout + 10 s (a TaskManager
    registers once its Spark workers are warm, so the rescaled tasks do not wait for them); the
    time is printed (-s)."""
    registered = len(cluster.alive())
    cluster.add_taskmanagers(1)
    poll_for(lambda: client.overview().taskmanagers == registered + 1, 120, interval=0.2, what="the TaskManager to register")
    joined = time.monotonic()
    poll_for(lambda: running_parallelism(client, job_id) == expected, STABILIZATION_S + 10, interval=0.2,
             what=f"the job running at parallelism {expected} within the stabilization timeout + 10 s")
    took = time.monotonic() - joined
    print(f"registration to running at parallelism {expected}: {took:.1f} s")
    return took


def stop_and_finish(client: ClusterClient, job_id: bytes, out: Path, tmp_path: Path, resume: Any) -> Any:
    """Stop-with-savepoint (after a checkpoint of the current graph with output), the stopped job
    FINISHED with part of the output; then ``resume(savepoint)``'s job runs to the end. Returns
    the stopped job's summary."""
    done = client.status(job_id).checkpoints.num_completed
    lines = len(visible_lines(out))
    poll_for(lambda: client.status(job_id).checkpoints.num_completed >= done + 1 and len(visible_lines(out)) > lines,
             60, what="a checkpoint of the rescaled job with output")
    savepoint = client.savepoint(job_id, str(tmp_path / "savepoints"), stop=True)
    stopped = poll_for(lambda: ended(client, job_id), 60, interval=0.2, what="the stopped job to end")
    assert JobStatus.from_proto(stopped.status) is JobStatus.FINISHED, stopped.failure.message
    assert 0 < len(visible_lines(out)) < COUNT, "the slow source should have been stopped long before its end"
    last = client.submit(resume(savepoint))
    summary = poll_for(lambda: ended(client, last), 180, interval=0.5, what="the resumed job to end")
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    return stopped


def test_a_job_starts_below_its_parallelism_rescales_up_when_a_task_manager_joins_and_stops_with_a_savepoint(tmp_path: Path) -> None:
    options = {"jobmanager.scheduler": "adaptive",
               "jobmanager.adaptive-scheduler.resource-stabilization-timeout": f"{STABILIZATION_S} s",
               "execution.checkpointing.dir": str(tmp_path / "checkpoints"),
               "web.adaptive-scheduler.rescale-history.size": "5", "rest.web.flink-dashboard": "true"}
    with ProcessCluster(tmp_path, slots=1, tasks_per_slot=3, taskmanagers=1, jobmanager_options=options,
                        rest=True) as cluster, ClusterClient(cluster.address) as client:
        out = tmp_path / "out"
        # the wish is 2: one 1-slot TaskManager gives it 1
        job_id = client.submit(counting_graph("adaptive, 1 then 2 slots", out, 2, SLOW))
        assert poll_for(lambda: running_parallelism(client, job_id), 120, what="the job running") == {1}
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 1, 60, what="a checkpoint")
        join_and_rescale(cluster, client, job_id, {2})
        details = json.loads(urllib.request.urlopen(f"{cluster.rest_url}/jobs/{job_id.hex()}", timeout=10).read())
        assert details["schedulerType"] == "Adaptive"
        assert {v["parallelism"] for v in details["vertices"]} == {2}  # /jobs/:id follows the rescale
        assert {n["parallelism"] for n in details["plan"]["nodes"]} == {2}
        flink_rescale_history(Rest(cluster.rest_url), job_id.hex(), details["vertices"], tmp_path)
        stopped = stop_and_finish(client, job_id, out, tmp_path,
                                  lambda savepoint: counting_graph("resumed", out, 2, None, savepoint))
        events = json.loads(urllib.request.urlopen(f"{cluster.rest_url}/jobs/{job_id.hex()}/rescale-events",
                                                   timeout=10).read())
        assert [(r["from"], r["to"]) for r in events["rescales"]] == [(1, 2)]
        # the ended job (its JobMaster gone) still says how it was scheduled and keeps its rescales
        rest = Rest(cluster.rest_url)
        assert rest.get(f"/jobs/{job_id.hex()}")["schedulerType"] == "Adaptive"
        assert [r["triggerCause"] for r in rest.get(f"/jobs/{job_id.hex()}/rescales/history")] == ["NEW_RESOURCE_AVAILABLE"]
        assert "rescaling" in events["rescales"][0]["reason"]
        web_ui_timeline_marks(cluster.rest_url, job_id, ["1 → 2"], tmp_path)
    assert stopped.checkpoints.latest_restored_id >= 1  # the rescale resumed from a checkpoint
    assert {v.parallelism for v in stopped.vertices} == {2}
    assert [(r.old_parallelism, r.new_parallelism) for r in stopped.rescales] == [(1, 2)]
    assert_exactly_once(out, COUNT)


def flink_rescale_history(rest: Rest, job: str, vertices: list[dict[str, Any]], tmp_path: Path) -> None:
    """Flink 2.3's /jobs/:jobid/rescales/* (web.adaptive-scheduler.rescale-history.size 5) list
    the rescale from 1 to 2 with each vertex before and after, in bodies that validate against
    the JSON Schema of Flink's response classes and that Flink's RestClient parses (contract.py,
    when a JDK and the flink-dist jar are there); Flink's dashboard shows its Rescales tab."""
    [rescale] = rest.get(f"/jobs/{job}/rescales/history")
    assert (rescale["triggerCause"], rescale["terminalState"], rescale["terminatedReason"]) == (
        "NEW_RESOURCE_AVAILABLE", "COMPLETED", "SUCCEEDED")
    assert rescale["startTimestampInMillis"] <= rescale["endTimestampInMillis"]
    assert {v["jobVertexId"]: (v["preRescaleParallelism"], v["postRescaleParallelism"], v["desiredParallelism"])
            for v in rescale["vertices"].values()} == {v["id"]: (1, 2, 2) for v in vertices}
    uuid = rescale["rescaleUuid"]
    paths = [f"/jobs/{job}/rescales/{what}" for what in ("config", "overview", "summary", "history")]
    paths.append(f"/jobs/{job}/rescales/details/{uuid}")
    bodies = {path: rest.get(path) for path in paths}
    assert bodies[paths[1]]["latest"]["completed"]["rescaleUuid"] == uuid
    assert bodies[paths[1]]["rescalesCounts"]["completed"] == 1
    assert bodies[paths[0]]["rescaleHistoryMax"] == 5
    assert bodies[paths[0]]["submissionResourceStabilizationTimeoutInMillis"] == STABILIZATION_S * 1000
    assert [state["state"] for state in bodies[paths[4]]["schedulerStates"]] == ["Restarting"]
    assert rest.call(f"/jobs/{job}/rescales/details/{'0' * 32}")[0] == 404
    _check_against_flinks_contract(bodies, tmp_path)
    _flink_dashboard_rescales_tab(rest.url, job, uuid)


def _check_against_flinks_contract(bodies: dict[str, Any], tmp_path: Path) -> None:
    from .flink_compat.contract import FlinkContract

    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed (pip install -e '.[test]')")
    contract = FlinkContract(tmp_path / "flink-contract")  # skips without a JDK or the flink-dist jar
    checked, problems = [], []
    for path, body in bodies.items():
        endpoint = contract.endpoint("GET", path)
        assert endpoint is not None and endpoint.url.startswith("/jobs/:jobid/rescales/"), path
        validator = jsonschema.Draft202012Validator(contract.schema(endpoint))
        problems += [f"{path} at /{'/'.join(map(str, e.absolute_path))}: {e.message[:300]}"
                     for e in validator.iter_errors(body)]
        checked.append((endpoint, path, body))
    problems += [f"Flink's RestClient: {line}" for line in contract.unparsable(checked)]
    assert len(checked) == 5 and problems == [], "\n".join(problems)


@contextlib.contextmanager
def _chromium_page(what: str) -> Iterator[Any]:
    """A page of Debian's headless Chromium through Playwright, or None (``what`` is then printed as
    not checked) when either is missing, as test_web_ui skips."""
    chromium = os.environ.get("MILLSTREAM_CHROMIUM", "/usr/bin/chromium")
    try:
        from playwright import sync_api
    except ImportError:
        sync_api = None  # type: ignore[assignment]
    if sync_api is None or not os.access(chromium, os.X_OK):
        print(f"{what} not checked: no Chromium at {chromium} or no Playwright")
        yield None
        return
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True,
                                             args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            yield browser.new_page()
        finally:
            browser.close()


def _flink_dashboard_rescales_tab(rest_url: str, job: str, uuid: str) -> None:
    """Flink's dashboard (rest.web.flink-dashboard) at the job's Rescales tab: the rescale's cause
    and its scheduler state show, and no REST request fails (checked in Chromium when present)."""
    with _chromium_page("Flink's dashboard") as page:
        if page is None:
            return
        from playwright.sync_api import expect
        problems: list[str] = []
        page.on("console", lambda m: problems.append(f"console {m.text[:300]}") if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(f"page error {e}"))
        page.on("response", lambda r: problems.append(f"HTTP {r.status} {r.url}") if r.status >= 400 else None)
        page.goto(f"{rest_url}/flink/#/job/running/{job}/rescales")
        expect(page.get_by_text("NEW_RESOURCE_AVAILABLE").first).to_be_visible(timeout=30_000)
        expect(page.get_by_text(uuid[:8]).first).to_be_visible(timeout=10_000)
        expect(page.get_by_text("Restarting").first).to_be_visible(timeout=10_000)
        page.wait_for_load_state("networkidle", timeout=10_000)
        assert problems == [], "\n".join(problems)


def web_ui_timeline_marks(rest_url: str, job_id: bytes, marks: list[str], tmp_path: Path) -> None:
    """The web UI's job page shows each rescale as a mark on its timeline (checked in Debian's
    headless Chromium when it and Playwright are installed, as test_web_ui does)."""
    with _chromium_page("web UI timeline") as page:
        if page is None:
            return
        from playwright.sync_api import expect
        page.goto(f"{rest_url}/#/jobs/{job_id.hex()}")
        rescale_marks = page.locator('#timeline-bar .timeline-mark[data-kind="rescale"]')
        expect(rescale_marks).to_have_text(marks, timeout=15_000)
        expect(page.locator('#timeline li[data-kind="rescale"]')).to_have_count(len(marks))
        page.screenshot(path=str(tmp_path / "timeline.png"), full_page=True)


def test_reactive_mode_scales_up_when_a_task_manager_joins_and_down_when_one_is_killed(tmp_path: Path) -> None:
    options = {"scheduler-mode": "reactive",
               "jobmanager.adaptive-scheduler.resource-stabilization-timeout": f"{STABILIZATION_S} s",
               "execution.checkpointing.dir": str(tmp_path / "checkpoints")}
    with ProcessCluster(tmp_path, slots=2, tasks_per_slot=3, taskmanagers=1, jobmanager_options=options) as cluster, \
            ClusterClient(cluster.address) as client:
        out, pids = tmp_path / "out", tmp_path / "pids"
        pids.mkdir()
        # reactive mode ignores the parallelism (every slot, up to the max parallelism); the lost
        # TaskManager is a failure the restart strategy counts, as in Flink: one restart allowed
        one_restart = RestartStrategies.fixed_delay_restart(1, 0)
        job_id = client.submit(counting_graph("reactive, join then kill -9", out, 1, SLOW, None, NotePid(str(pids)),
                                              restarts=one_restart))
        assert poll_for(lambda: running_parallelism(client, job_id), 120, what="the job running") == {2}
        join_and_rescale(cluster, client, job_id, {4})
        rescaled = client.status(job_id).checkpoints.num_completed
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= rescaled + 1, 60, what="a checkpoint more")
        pid = int((pids / "pid-1-1").read_text())  # subtask 1, in the rescaled graph (attempt 1)
        victims = [tm for tm in cluster.taskmanagers if tm.pid in ancestors(pid)]
        assert len(victims) == 1
        victims[0].kill()
        victims[0].wait(10)
        poll_for(lambda: running_parallelism(client, job_id) == {2}, 120, interval=0.2,
                 what="the job running at parallelism 2 again")
        stopped = stop_and_finish(client, job_id, out, tmp_path,
                                  lambda savepoint: counting_graph("resumed", out, 1, None, savepoint, NotePid(str(pids))))
    assert stopped.num_restarts == 2  # the rescale and the scale-down
    assert [(r.old_parallelism, r.new_parallelism) for r in stopped.rescales] == [(2, 4), (4, 2)]
    assert {v.parallelism for v in stopped.vertices} == {2}
    assert_exactly_once(out, COUNT)
