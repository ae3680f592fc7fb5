"""Millstream's REST API against Flink 2.3's own REST contract: every path Millstream serves,
for a running job that checkpoints, a job that finished, one that failed and one stopped with a
savepoint (with a checkpoint and a savepoint triggered by hand, and a savepoint disposed),
answers as the Flink endpoint of the same path: Flink's status code, a body that validates
against the JSON Schema of Flink's response class (every field Flink writes, its type, its
enum values; read from the installed flink-dist jar, see contract.py), and that Flink's own
RestClient parses. Paths Flink does not have, and those that answer as Flink does with a feature
off (404), are listed here and nowhere else, so a new path cannot go unchecked."""
from __future__ import annotations

import re
from typing import Any, Iterator

import pytest

from millstream.datastream import MapFunction, StreamExecutionEnvironment
from millstream.jobmanager.rest.server import ROUTES

from ..harness import Rest, poll_for
from ..jobs import Endless
from .conftest import SharedCluster, cancel_running
from .contract import Endpoint, FlinkContract

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed (pip install -e '.[test]')")

pytestmark = pytest.mark.timeout(400)

# Millstream's paths without a JSON contract in Flink: its own OpenAPI document, files and text
# (Flink serves them with file handlers, not JSON), a subtask's output, the dashboard's legacy
# cancel (a GET with a side effect: not called here).
NOT_FLINK_JSON = {
    "/v1/openapi.json", "/jobmanager/log", "/jobmanager/stdout", "/jobmanager/logs/{filename}",
    "/taskmanagers/{taskmanagerid}/log", "/taskmanagers/{taskmanagerid}/stdout",
    "/taskmanagers/{taskmanagerid}/logs/{filename}", "/jobs/{jobid}/vertices/{vertexid}/subtasks/{subtaskindex}/output",
    "/jobs/{jobid}/yarn-cancel", "/jobs/{jobid}/rescale-events",
}
# Answered 404 as Flink answers with the feature off (the default scheduler: no rescale history;
# under the adaptive scheduler test_adaptive_scheduler checks their bodies against this contract).
FEATURE_OFF = {"/jobs/{jobid}/rescales/config", "/jobs/{jobid}/rescales/overview", "/jobs/{jobid}/rescales/summary",
               "/jobs/{jobid}/rescales/history", "/jobs/{jobid}/rescales/details/{rescaleuuid}"}


class FailsAtOnce(MapFunction):
    def map(self, value):  # noqa: ANN001, ANN201
        raise ValueError("the contract test's failing job")


@pytest.fixture(scope="module")
def contract(tmp_path_factory: pytest.TempPathFactory) -> FlinkContract:
    return FlinkContract(tmp_path_factory.mktemp("flink-contract"))


class Scene:
    """The jobs and operations whose answers are checked; ``posted``: the answers of the POSTs."""

    def __init__(self) -> None:
        self.jobs: dict[str, str] = {}  # running, finished, failed, stopped -> job id
        self.triggers: dict[str, list[tuple[str, str]]] = {}  # route template -> (job id or "", trigger id)
        self.posted: list[tuple[str, str, int, Any]] = []  # (method, path, status, body)


def _submit(cluster: SharedCluster, name: str, *, finite: bool = False, failing: bool = False) -> str:
    """A job that checkpoints rarely (the checkpoints checked are the ones taken by hand: a
    periodic one every few hundred ms would push them out of the ten-entry history while the
    test reads them)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.enable_checkpointing(600_000)
    source = env.from_collection(list(range(50))) if finite else env.add_source(Endless(every=10, pause_s=0.02))
    keyed = source.key_by(lambda x: x % 3)
    (keyed.map(FailsAtOnce()) if failing else keyed.map(lambda x: x)).add_sink(lambda x: None)
    return cluster.client.submit(env.get_job_graph(name).proto).hex()


def _operation(rest: Rest, scene: Scene, template: str, job: str, path: str, body: dict[str, Any],
               status_path: str) -> Any:
    """POSTs ``body`` to ``path`` (the answer recorded), then polls the operation's status until it
    completed (succeeded or failed); None when it is refused (409 while the job cannot take it yet)."""
    status, answer = rest.call(path, "POST", body)
    if status == 409:
        return None
    scene.posted.append(("POST", path, status, answer))
    assert status < 300, (path, status, answer)
    trigger = answer["request-id"]
    scene.triggers.setdefault(template, []).append((job, trigger))
    return poll_for(lambda: (r := rest.get(status_path.format(trigger=trigger)))["status"]["id"] == "COMPLETED" and r,
                    90, interval=0.3, what=f"{path} completed")


@pytest.fixture(scope="module")
def scene(shared_cluster: SharedCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    cluster, rest, scene = shared_cluster, shared_cluster.rest, Scene()
    directory = tmp_path_factory.mktemp("contract-savepoints")
    scene.jobs["failed"] = failed = _submit(cluster, "contract: failed", failing=True)
    scene.jobs["finished"] = finished = _submit(cluster, "contract: finished", finite=True)
    scene.jobs["running"] = running = _submit(cluster, "contract: running")
    scene.jobs["stopped"] = stopped = _submit(cluster, "contract: stopped")
    for job, state in ((failed, "FAILED"), (finished, "FINISHED")):
        poll_for(lambda: rest.get(f"/jobs/{job}")["state"] == state, 90, interval=0.3, what=state)
    for job in (running, stopped):
        poll_for(lambda: rest.get(f"/jobs/{job}")["status-counts"]["RUNNING"] == 2, 90, interval=0.3, what="RUNNING")
    # A checkpoint and a savepoint by hand (retried while a periodic checkpoint is in flight).
    def succeeded(result: Any, key: str) -> Any:
        return result and result["operation"].get(key)

    poll_for(lambda: succeeded(_operation(rest, scene, "/jobs/{jobid}/checkpoints/{triggerid}", running,
                                          f"/jobs/{running}/checkpoints", {"checkpointType": "FULL"},
                                          f"/jobs/{running}/checkpoints/{{trigger}}"), "checkpointId"),
             90, interval=0.5, what="a checkpoint by hand")
    location = poll_for(lambda: succeeded(_operation(rest, scene, "/jobs/{jobid}/savepoints/{triggerid}", running,
                                                     f"/jobs/{running}/savepoints", {"target-directory": str(directory)},
                                                     f"/jobs/{running}/savepoints/{{trigger}}"),
                                          "location"), 90, interval=0.5, what="a savepoint")
    _operation(rest, scene, "/savepoint-disposal/{triggerid}", "", "/savepoint-disposal", {"savepoint-path": location},
               "/savepoint-disposal/{trigger}")
    poll_for(lambda: succeeded(_operation(rest, scene, "/jobs/{jobid}/savepoints/{triggerid}", stopped,
                                          f"/jobs/{stopped}/stop", {"targetDirectory": str(directory)},
                                          f"/jobs/{stopped}/savepoints/{{trigger}}"), "location"),
             90, interval=0.5, what="a stop")
    poll_for(lambda: rest.get(f"/jobs/{stopped}")["state"] == "FINISHED", 60, interval=0.3, what="FINISHED")
    yield scene
    cancel_running(cluster, running)


def _paths(rest: Rest, scene: Scene, template: str) -> list[str]:
    """``template`` with every id it can take in the scene."""
    [tm] = [t["id"] for t in rest.get("/taskmanagers")["taskmanagers"]]
    bindings: list[dict[str, str]] = [{}]

    def bind(name: str, values: Any) -> None:
        nonlocal bindings
        bindings = [{**b, name: v} for b in bindings for v in (values(b) if callable(values) else values)]

    names = re.findall(r"{(\w+)}", template)
    if "jobid" in names:
        bind("jobid", list(scene.jobs.values()))
    if "vertexid" in names:
        bind("vertexid", lambda b: [v["id"] for v in rest.get(f"/jobs/{b['jobid']}")["vertices"]])
    if "checkpointid" in names:
        def checkpoints(b: dict[str, str]) -> list[str]:
            stats = rest.get(f"/jobs/{b['jobid']}/checkpoints")
            kept = [*stats["history"], *(e for e in stats["latest"].values() if e and "status" in e)]
            return sorted({str(e["id"]) for e in kept})
        bind("checkpointid", checkpoints)
    if "triggerid" in names:
        bindings = [{**b, "jobid": job, "triggerid": trigger} if job else {**b, "triggerid": trigger}
                    for b in bindings for job, trigger in scene.triggers.get(template, [])
                    if not job or b.get("jobid") == job]
    if "taskmanagerid" in names:
        bind("taskmanagerid", [tm])
    if "subtaskindex" in names:
        bind("subtaskindex", ["0"])
    if "rescaleuuid" in names:
        bind("rescaleuuid", ["0123456789abcdef0123456789abcdef"])
    if "filename" in names:
        return []  # files: no JSON contract
    return [template.format(**b) for b in bindings]


def test_every_path_answers_as_flink_does(shared_cluster: SharedCluster, scene: Scene, contract: FlinkContract) -> None:
    rest = shared_cluster.rest
    checked: list[tuple[Endpoint, str, Any]] = []
    problems: list[str] = []
    unchecked: set[str] = set()
    for template, methods in ROUTES.items():
        if "get" not in methods or template in NOT_FLINK_JSON:
            continue
        paths = _paths(rest, scene, template)
        if template in FEATURE_OFF:
            for path in paths:
                status, _ = rest.call(path)
                if status != 404:
                    problems.append(f"GET {path}: {status}, not Flink's 404 with the feature off")
            continue
        if not paths:
            unchecked.add(template)
        for path in paths:
            endpoint = contract.endpoint("GET", path)
            if endpoint is None:
                problems.append(f"GET {path}: Flink has no such path (list it in NOT_FLINK_JSON if that is meant)")
                continue
            status, body = rest.call(path)
            if status != endpoint.status:
                problems.append(f"GET {path}: status {status}, Flink's is {endpoint.status}: {str(body)[:300]}")
                continue
            checked.append((endpoint, path, body))
    for method, path, status, body in scene.posted:
        endpoint = contract.endpoint(method, path)
        assert endpoint is not None, path
        if status != endpoint.status:
            problems.append(f"{method} {path}: status {status}, Flink's is {endpoint.status}")
        checked.append((endpoint, path, body))
    for endpoint, path, body in checked:
        validator = jsonschema.Draft202012Validator(contract.schema(endpoint))
        for error in sorted(validator.iter_errors(body), key=lambda e: list(e.absolute_path)):
            where = "/".join(str(p) for p in error.absolute_path)
            problems.append(f"{endpoint.method} {path} ({endpoint.response.rsplit('.', 1)[-1]}) at /{where}: "
                            f"{error.message[:300]}")
    problems += [f"Flink's RestClient: {line}" for line in contract.unparsable(checked)]
    assert unchecked == set(), f"routes with nothing to check: {sorted(unchecked)}"
    assert len({e.url for e, _, _ in checked}) >= 30, "too few of Flink's endpoints were checked"
    assert problems == [], f"{len(problems)} mismatches:\n" + "\n".join(problems)
