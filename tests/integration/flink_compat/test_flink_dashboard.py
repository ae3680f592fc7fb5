"""Flink 2.3's own web dashboard (``rest.web.flink-dashboard: true``: the JobManager serves it at
/flink/ from the apache-flink-libraries wheel's flink-dist jar) in Debian's headless Chromium:
every page for a running, a failed and a stopped job, and the cluster's pages, load with no
failed REST request and no console error. With MILLSTREAM_SCREENSHOTS=DIR each page's screenshot goes there.

Left out, as on a Flink cluster with these features off (Flink answers 404 there too): job
submission (/jars, web.submit.enable: false), the profiler (rest.profiling.enabled: false) and
rescale history (no adaptive scheduler)."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.datastream import MapFunction, StreamExecutionEnvironment

from ..flink_tools import FLINK_HOME
from ..harness import Rest, poll_for
from ..jobs import Endless
from .conftest import SharedCluster, cancel_running

CHROMIUM = os.environ.get("MILLSTREAM_CHROMIUM", "/usr/bin/chromium")
if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
    pytest.skip(f"no Chromium at {CHROMIUM}: `make browser` installs Debian's chromium (as root with apt-get)",
                allow_module_level=True)
if not list((FLINK_HOME / "lib").glob("flink-dist*.jar")):
    pytest.skip(f"no flink-dist jar under {FLINK_HOME / 'lib'}: `make install` installs the apache-flink-libraries "
                "wheel there (or set MILLSTREAM_FLINK_HOME)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install -e '.[test]')")

pytestmark = pytest.mark.timeout(600)

JOB_TABS = ("overview", "exceptions", "dataskew", "timeline", "checkpoints", "configuration")
VERTEX_TABS = ("detail", "subtasks", "taskmanagers", "watermarks", "accumulators", "backpressure", "metrics",
               "flamegraph")


class FailsAtOnce(MapFunction):
    def map(self, value):  # noqa: ANN001, ANN201
        raise ValueError("the dashboard shows this failure")


@pytest.fixture(scope="module")
def cluster(shared_cluster: SharedCluster) -> tuple[ClusterClient, Rest, Path]:
    return shared_cluster.client, shared_cluster.rest, shared_cluster.directory


@pytest.fixture(scope="module")
def jobs(shared_cluster: SharedCluster, cluster) -> Iterator[dict[str, tuple[str, str]]]:  # noqa: ANN001
    """name -> (job id, the dashboard's route prefix): a running, a failed and a stopped job."""
    client, rest, directory = cluster

    def submit(name: str, failing: bool = False) -> str:
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(1)
        env.enable_checkpointing(1000)
        stream = env.add_source(Endless(every=10, pause_s=0.05)).key_by(lambda x: x % 3)
        (stream.map(FailsAtOnce()) if failing else stream.map(lambda x: x)).add_sink(lambda x: None)
        return client.submit(env.get_job_graph(name).proto).hex()

    failed = submit("failing job", failing=True)
    poll_for(lambda: rest.get(f"/jobs/{failed}")["state"] == "FAILED", 90, interval=0.3, what="FAILED")
    stopped = submit("stopped job")
    poll_for(lambda: rest.get(f"/jobs/{stopped}")["status-counts"]["RUNNING"] == 2, 90, interval=0.3, what="RUNNING")

    def stop() -> Any:
        status, body = rest.call(f"/jobs/{stopped}/stop", "POST", {"targetDirectory": str(directory / "sp")})
        assert status == 202, body
        result = poll_for(lambda: (r := rest.get(f"/jobs/{stopped}/savepoints/{body['request-id']}"))["status"]["id"]
                          == "COMPLETED" and r, 90, interval=0.3, what="the stop")
        return "location" in result["operation"]
    poll_for(stop, 90, interval=1, what="stop-with-savepoint")
    running = submit("running job")
    poll_for(lambda: rest.get(f"/jobs/{running}")["status-counts"]["RUNNING"] == 2, 90, interval=0.3, what="RUNNING")
    poll_for(lambda: rest.get(f"/jobs/{running}/checkpoints")["counts"]["completed"] >= 1, 60, interval=0.3,
             what="a checkpoint")
    yield {"running job": (running, "job/running"), "failing job": (failed, "job/completed"),
           "stopped job": (stopped, "job/completed")}
    cancel_running(shared_cluster, running)


@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Iterator[Any]:  # noqa: ANN001
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, viewport={"width": 1400, "height": 900},
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-proxy-server"])
        try:
            yield context
        finally:
            context.close()
    shutil.rmtree(profile, ignore_errors=True)


def _visit(browser: Any, base: str, routes: list[tuple[str, str | None]], shots: Path | None) -> list[str]:
    """Loads each ``(route, text it must show)`` of the dashboard; returns what went wrong: REST
    answers of 400 and above, failed requests, console errors, uncaught exceptions."""
    page = browser.new_page()
    problems: list[str] = []
    current = [""]
    page.on("console", lambda m: problems.append(f"{current[0]}: console {m.text[:300]}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"{current[0]}: page error {e}"))
    # A request the browser itself cancelled (net::ERR_ABORTED: the test navigating on, or the
    # page's next 3 s refresh replacing a slow answer under load) is not a server failure; every
    # other failure (reset, empty answer, refused) is.
    page.on("requestfailed", lambda r: None if r.failure == "net::ERR_ABORTED"
            else problems.append(f"{current[0]}: request failed {r.url} ({r.failure})"))
    page.on("response", lambda r: problems.append(f"{current[0]}: HTTP {r.status} {r.url}") if r.status >= 400 else None)
    for route, text in routes:
        current[0] = route
        page.goto("about:blank")  # each page loaded afresh, as a link opened from elsewhere
        page.goto(f"{base}/flink/#/{route}")
        if text is not None:
            sync_api.expect(page.get_by_text(text).first).to_be_visible(timeout=30_000)
        # The page's follow-up requests: done once the network is quiet for 0.5 s (its refresh
        # comes every 3 s), which takes less than a fixed wait.
        page.wait_for_load_state("networkidle", timeout=10_000)
        if shots is not None:
            page.screenshot(path=str(shots / (route.replace("/", "_")[:150] + ".png")))
    page.close()
    return problems


def _shots() -> Path | None:
    """Where screenshots go (MILLSTREAM_SCREENSHOTS), or None: CI does not look at them."""
    directory = os.environ.get("MILLSTREAM_SCREENSHOTS")
    if not directory:
        return None
    shots = Path(directory)
    shots.mkdir(parents=True, exist_ok=True)
    return shots


def test_every_job_page_of_a_running_a_failed_and_a_stopped_job(cluster, jobs, browser) -> None:  # noqa: ANN001
    _, rest, _ = cluster
    routes: list[tuple[str, str | None]] = []
    for name, (job, prefix) in jobs.items():
        routes += [(f"{prefix}/{job}/{tab}", name) for tab in JOB_TABS]
        vertices = [v["id"] for v in rest.get(f"/jobs/{job}")["vertices"]]
        # every vertex of the running job; of an ended job its first (the others are answered by the
        # same handlers from the same archived state: ~2 s a page is what CI's time allows)
        for vertex in vertices if name == "running job" else vertices[:1]:
            routes += [(f"{prefix}/{job}/overview/{vertex}/{tab}", name) for tab in VERTEX_TABS]
    problems = _visit(browser, rest.url, routes, _shots())
    assert problems == [], "\n".join(problems)


def test_the_cluster_pages(cluster, jobs, browser) -> None:  # noqa: ANN001
    _, rest, _ = cluster
    [tm] = rest.get("/taskmanagers")["taskmanagers"]
    running, _ = jobs["running job"]
    routes: list[tuple[str, str | None]] = [
        ("overview", "running job"), ("job/running", "running job"), ("job/completed", "stopped job"),
        ("application/running", "running job"), ("application/completed", "failing job"), ("task-manager", tm["id"]),
        *((f"task-manager/{tm['id']}/{tab}", None) for tab in ("metrics", "logs", "stdout", "log-list", "thread-dump")),
        *((f"job-manager/{tab}", None) for tab in ("config", "metrics", "logs", "stdout", "log-list", "thread-dump",
                                                   "cluster_configuration")),
    ]
    problems = _visit(browser, rest.url, routes, _shots())
    assert problems == [], "\n".join(problems)
    # The dashboard's Cancel button: GET /jobs/:id/yarn-cancel.
    page = browser.new_page()
    page.goto(f"{rest.url}/flink/#/job/running/{running}/overview")
    page.get_by_text("Cancel Job").first.click()
    confirm = page.get_by_role("button", name="Yes")
    if confirm.count():
        confirm.first.click()
    started = time.monotonic()
    poll_for(lambda: rest.get(f"/jobs/{running}")["state"] == "CANCELED", 60, interval=0.3, what="the job CANCELED")
    assert time.monotonic() - started < 60
    page.close()
