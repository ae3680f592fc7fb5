"""The web UI in a real browser: Debian's headless Chromium driven by Playwright against a
JobManager process (``-Drest.port=0``) with one TaskManager, running a throttled job (~6 s).

Skips, saying why, when Chromium (``make browser``) or Playwright (the ``[test]`` extra) is missing."""
from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.datastream import MapFunction, StreamExecutionEnvironment

from .harness import Rest, poll_for, rest_cluster
from .jobs import Endless

CHROMIUM = os.environ.get("MILLSTREAM_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-proxy-server"]

if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
    pytest.skip(f"no Chromium at {CHROMIUM}: `make browser` installs Debian's chromium (as root with apt-get)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install -e '.[test]')")

pytestmark = pytest.mark.timeout(120)


def throttled(x: int) -> int:
    time.sleep(0.1)
    return x


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[tuple[ClusterClient, Rest]]:
    yield from rest_cluster(tmp_path_factory.mktemp("web-cluster"))


@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Iterator[Any]:
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 800})
        try:
            yield context
        finally:
            context.close()
    shutil.rmtree(profile, ignore_errors=True)


def test_overview_job_graph_and_taskmanagers_pages(cluster, browser, tmp_path: Path) -> None:  # noqa: ANN001
    client, rest = cluster
    expect = sync_api.expect
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    page.goto(rest.url + "/")
    expect(page.locator('#overview .stat[data-field="taskmanagers"] .value')).to_have_text("1", timeout=15_000)
    expect(page.locator('#overview .stat[data-field="slots-total"] .value')).to_have_text("2")
    page.screenshot(path=str(tmp_path / "overview.png"), full_page=True)

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_collection(list(range(60))).map(throttled).key_by(lambda x: x % 3).map(lambda x: x).add_sink(lambda x: None)
    job_id = client.submit(env.get_job_graph("web ui throttled").proto).hex()

    # The jobs list links the job; the job page draws its graph from the plan.
    page.goto(rest.url + "/#/jobs")
    link = page.locator(f'#jobs-table tr.job-row[data-jid="{job_id}"] a.job-link')
    expect(link).to_have_text("web ui throttled", timeout=10_000)
    link.click()
    expect(page.locator("#job")).to_have_attribute("data-jid", job_id)
    expect(page.locator("#job-name")).to_have_text("web ui throttled")
    details = rest.get(f"/jobs/{job_id}")
    vertices = page.locator("svg#job-graph .vertex")
    expect(vertices).to_have_count(len(details["vertices"]))
    assert [vertices.nth(i).get_attribute("data-name") for i in range(vertices.count())] == \
        [v["name"] for v in details["vertices"]]
    assert [vertices.nth(i).get_attribute("data-id") for i in range(vertices.count())] == \
        [v["id"] for v in details["vertices"]]
    edge = page.locator("svg#job-graph text.edge-label")
    expect(edge).to_have_count(1)
    expect(edge).to_have_text("HASH")
    # Left to right by topological level: the keyed vertex is right of the source's.
    xs = [vertices.nth(i).bounding_box()["x"] for i in range(2)]  # type: ignore[index]
    assert xs[0] < xs[1]

    # Running, then FINISHED, without a reload (the page refreshes every 2 s).
    expect(page.locator('svg#job-graph .vertex[data-status="RUNNING"]').first).to_be_visible(timeout=60_000)
    expect(page.locator("#job-state")).to_have_text("RUNNING")
    expect(page.locator("#cancel-job")).to_be_visible()
    # No checkpoints (REST: 404), so no savepoint can be taken: no button offering one.
    assert rest.call(f"/jobs/{job_id}/checkpoints")[0] == 404
    expect(page.locator("#trigger-savepoint")).to_have_count(0)
    # The source vertex (chained with the sleeping map) is busy nearly all of each second; its
    # ratio comes from the task's busyTimeMsPerSecond, reported with the heartbeats.
    load = vertices.first.locator(".vertex-load")
    expect(load).to_have_attribute("data-busy", re.compile(r"^(0\.[5-9]\d*|1(\.0+)?)$"), timeout=20_000)
    expect(load).to_contain_text("busy ")
    page.screenshot(path=str(tmp_path / "job-running.png"), full_page=True)
    expect(page.locator("#job-state")).to_have_text("FINISHED", timeout=60_000)
    expect(page.locator('svg#job-graph .vertex[data-status="FINISHED"]')).to_have_count(len(details["vertices"]),
                                                                                      timeout=5_000)
    expect(page.locator("#cancel-job")).to_have_count(0)
    expect(page.locator("#no-exception")).to_be_visible()
    expect(page.locator("svg#job-graph .vertex").last.locator(".vertex-records")).to_have_attribute("data-in", "60")
    page.screenshot(path=str(tmp_path / "job-finished.png"), full_page=True)

    # A vertex opens its subtasks: status, records and the output link, from /jobs/:id/vertices/:vid.
    vertices.last.click()
    expect(page.locator("#vertex")).to_have_attribute("data-vid", details["vertices"][-1]["id"])
    subtask = page.locator('#subtasks-table tr.subtask[data-subtask="0"]')
    expect(subtask).to_have_attribute("data-status", "FINISHED", timeout=10_000)
    expect(subtask.locator(".records-in")).to_have_text("60")
    page.screenshot(path=str(tmp_path / "vertex-subtasks.png"), full_page=True)

    page.click("#nav-taskmanagers")
    [tm] = rest.get("/taskmanagers")["taskmanagers"]
    row = page.locator(f'#taskmanagers-table tr.taskmanager[data-id="{tm["id"]}"]')
    expect(row).to_be_visible(timeout=10_000)
    expect(row.locator(".slots")).to_have_text("2")
    expect(row.locator(".memory")).to_have_text(re.compile(r"\d+(\.\d)? (MiB|GiB)"))
    page.screenshot(path=str(tmp_path / "taskmanagers.png"), full_page=True)
    assert errors == []
    assert (tmp_path / "job-finished.png").stat().st_size > 0


class FailsAlways(MapFunction):
    def map(self, value):  # noqa: ANN001, ANN201
        raise ValueError(f"web ui sees record {value}")


def test_checkpoints_savepoint_button_and_exception_history(cluster, browser, tmp_path: Path) -> None:  # noqa: ANN001
    """A checkpointed job's page lists its completed checkpoints; the savepoint button asks for a
    directory (the cluster has no default), then shows the savepoint's location; a failed job's
    page lists its exception history, each traceback expandable."""
    client, rest = cluster
    expect = sync_api.expect
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.enable_checkpointing(300)
    env.add_source(Endless(every=100)).map(lambda x: x).add_sink(lambda x: None)
    job_id = client.submit(env.get_job_graph("web ui checkpointed").proto).hex()
    try:
        page.goto(rest.url + f"/#/jobs/{job_id}")
        expect(page.locator("#job-state")).to_have_text("RUNNING", timeout=60_000)
        expect(page.locator('#checkpoint-history .checkpoint-row[data-status="COMPLETED"]').first).to_be_visible(timeout=30_000)
        assert int(page.locator('#checkpoints .stat[data-field="completed"] .value').inner_text()) >= 1
        expect(page.locator("#latest-completed")).to_contain_text("Latest completed: #")
        page.screenshot(path=str(tmp_path / "checkpoints.png"), full_page=True)

        page.click("#trigger-savepoint")  # no directory typed, none configured: the page asks for one
        expect(page.locator("#savepoint-error")).to_contain_text("savepoint-dir", timeout=10_000)
        expect(page.locator("#savepoint-dir.needed")).to_be_visible()
        target = tmp_path / "savepoints"
        page.fill("#savepoint-dir", str(target))
        page.click("#trigger-savepoint")
        expect(page.locator("#savepoint-location code")).to_contain_text(str(target), timeout=60_000)
        location = page.locator("#savepoint-location code").inner_text()
        assert (Path(location) / "_metadata").is_file()
        expect(page.locator('#checkpoint-history .checkpoint-row td:text-is("savepoint")').first).to_be_visible(timeout=10_000)
        page.screenshot(path=str(tmp_path / "savepoint.png"), full_page=True)
    finally:
        rest.call(f"/jobs/{job_id}?mode=cancel", "PATCH")

    failing = StreamExecutionEnvironment.get_execution_environment()
    failing.set_parallelism(1)
    failing.from_collection([1, 2, 3]).map(FailsAlways()).add_sink(lambda x: None)
    failed_id = client.submit(failing.get_job_graph("web ui fails").proto).hex()
    page.goto(rest.url + f"/#/jobs/{failed_id}")
    expect(page.locator("#job-state")).to_have_text("FAILED", timeout=60_000)
    entry = page.locator("#exception-history details.exception-entry")
    expect(entry).to_have_count(1)
    expect(entry.locator("pre.stacktrace")).to_be_hidden()
    entry.locator("summary").click()
    expect(entry.locator("pre.stacktrace")).to_contain_text("ValueError: web ui sees record 1")
    page.wait_for_timeout(2_500)  # a refresh of the page keeps it expanded
    expect(entry.locator("pre.stacktrace")).to_be_visible()
    page.screenshot(path=str(tmp_path / "exceptions.png"), full_page=True)
    assert errors == []


def printing(x: int) -> int:
    print(f"web ui print {x}")
    return x


def test_log_pages_show_a_user_print_and_the_processes_logs(cluster, browser, tmp_path: Path) -> None:  # noqa: ANN001
    client, rest = cluster
    expect = sync_api.expect
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_collection([1, 2, 3]).map(printing).name("Printing").add_sink(lambda x: None)
    job_id = client.submit(env.get_job_graph("web ui printing").proto).hex()
    poll_for(lambda: rest.get(f"/jobs/{job_id}")["state"] == "FINISHED", 90, interval=0.3, what="the job FINISHED")
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    # The job page links each subtask's output; the output page shows what the map printed.
    page.goto(rest.url + f"/#/jobs/{job_id}")
    link = page.locator("#subtask-outputs a.subtask-output-link").first
    expect(link).to_have_attribute("data-subtask", "0", timeout=10_000)
    link.click()
    expect(page.locator("#subtask-output #log-text")).to_contain_text("INFO stdout: web ui print 3", timeout=15_000)
    expect(page.locator("#subtask-output #log-text")).to_contain_text("attempt 0, FINISHED")
    page.screenshot(path=str(tmp_path / "subtask-output.png"), full_page=True)

    page.click("#nav-logs")  # the JobManager's log tail, with a refresh button
    expect(page.locator("#jobmanager-log #log-text")).to_contain_text("JobManager", timeout=10_000)
    before = page.locator("#log-text").get_attribute("data-loaded")
    page.click("#log-refresh")
    expect(page.locator("#log-text")).not_to_have_attribute("data-loaded", before or "", timeout=10_000)

    [tm] = rest.get("/taskmanagers")["taskmanagers"]
    page.click("#nav-taskmanagers")
    page.locator(f'#taskmanagers-table tr.taskmanager[data-id="{tm["id"]}"] a.tm-log-link').click()
    expect(page.locator("#taskmanager-log #log-text")).to_contain_text(f"TaskManager {tm['id']}", timeout=10_000)
    page.select_option("#log-source", label="Stdout")  # the TaskManager's stdout is a file here: its tasks' prints
    expect(page.locator("#taskmanager-log #log-text")).to_contain_text("INFO stdout: web ui print", timeout=10_000)
    page.screenshot(path=str(tmp_path / "taskmanager-log.png"), full_page=True)
    assert errors == []


def test_the_page_asks_for_the_token_once_and_cancels_with_it(browser, tmp_path: Path) -> None:  # noqa: ANN001
    """Token authentication on: the static files load without a token, the page asks for the
    client token, then reads the API and cancels with ``Authorization: Bearer``."""
    import asyncio
    import threading

    from millstream.jobmanager.rest.server import RestServer
    from millstream.runtime.rpc.auth import Role, TokenAuthenticator
    from tests.integration.rest_fakes import JOB, FakeSource

    source = FakeSource()
    server = RestServer(source, "0.1.0", authenticator=TokenAuthenticator(
        {Role.CLIENT: "client-secret", Role.CLUSTER: "cluster-secret"}))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(server.start("127.0.0.1", 0), loop).result(10)
    expect = sync_api.expect
    page = browser.new_page()
    try:
        page.goto(server.url + "/")
        expect(page.locator("#token-form")).to_be_visible(timeout=10_000)
        page.fill("#token-input", "client-secret")
        page.click("#token-submit")
        expect(page.locator("#token-form")).to_be_hidden()
        expect(page.locator('#overview .stat[data-field="taskmanagers"] .value')).to_have_text("1", timeout=10_000)
        page.goto(server.url + f"/#/jobs/{JOB.hex()}")
        expect(page.locator("#job-state")).to_have_text("RUNNING", timeout=10_000)
        page.screenshot(path=str(tmp_path / "token-job.png"), full_page=True)
        page.click("#cancel-job")
        poll_for(lambda: source.cancelled == [JOB], 10, what="the cancellation over REST")
        expect(page.locator("#token-form")).to_be_hidden()  # asked once: the token is kept
    finally:
        page.close()
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
