"""The source coordinators' shell (jobmanager/jobmaster/source_coordinators): what it must keep of
Flink's event valve. Calls to one reader task go out one at a time, in the order they were made,
however long each takes (a checkpoint trigger never overtakes an assignment made before the
coordinator's snapshot, nor the other way round); calls to different tasks do not wait for each
other. A fake TaskExecutor gateway (the gateway's documented fake) records the calls."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from millstream.jobmanager.jobmaster.source_coordinators import SourceCoordinators


class FakeGateways:
    """TaskExecutorClients' surface: ``gateway(address)``, ``in_flight``, ``rpc_timeout_s``."""

    def __init__(self, delays: dict[str, float]) -> None:
        self.delays = delays
        self.calls: list[tuple[str, str]] = []  # (what, "start" | "end")
        self.in_flight = asyncio.Semaphore(64)
        self.rpc_timeout_s = 5.0

    def gateway(self, address: str) -> Any:
        fake = self

        class Gateway:
            async def send_operator_event(self, request: Any, timeout: float) -> None:
                await fake._call(request)

            async def trigger_checkpoint(self, request: Any, timeout: float) -> None:
                await fake._call(request)
        return Gateway()

    async def _call(self, request: Any) -> None:
        self.calls.append((request, "start"))
        await asyncio.sleep(self.delays.get(request, 0))
        self.calls.append((request, "end"))


def coordinators(te: FakeGateways) -> tuple[SourceCoordinators, list[Any]]:
    tasks: list[Any] = []
    core = SimpleNamespace(graph=SimpleNamespace(job_vertices=[]), executions={})
    return SourceCoordinators(core, te, lambda message: None, tasks.append), tasks  # type: ignore[arg-type]


def test_calls_to_one_task_go_out_one_at_a_time_in_order_and_other_tasks_do_not_wait() -> None:
    async def run() -> list[tuple[str, str]]:
        te = FakeGateways({"assign": 0.05, "other": 0.0})
        c, tasks = coordinators(te)
        c.send_ordered(b"a", "tm:1", "send_operator_event", "assign")  # slow
        c.send_ordered(b"a", "tm:1", "trigger_checkpoint", "barrier")
        c.send_ordered(b"a", "tm:1", "send_operator_event", "after")
        c.send_ordered(b"b", "tm:1", "send_operator_event", "other")  # another task: at once
        await asyncio.gather(*tasks)
        return te.calls
    calls = asyncio.run(run())
    of_a = [c for c in calls if c[0] != "other"]
    assert of_a == [("assign", "start"), ("assign", "end"), ("barrier", "start"), ("barrier", "end"),
                    ("after", "start"), ("after", "end")]
    assert calls.index(("other", "end")) < calls.index(("assign", "end"))


def test_a_coordinator_less_job_has_no_coordinators() -> None:
    c, _ = coordinators(FakeGateways({}))
    assert not c and not c.is_coordinated(b"any") and c.snapshot(1) == {}


def test_a_rescaled_source_vertex_gets_its_enumerator_reset_to_the_restored_checkpoint_at_its_new_parallelism() -> None:
    from millstream.jobmanager.jobmaster.source_coordinator import KafkaSplitEnumerator
    from millstream.runtime.operator_factories import KafkaSourceFactory
    from millstream.runtime.operators.kafka_splits import coordinator_settings
    from millstream.runtime.operators.source_events import KafkaSplit

    settings = coordinator_settings(KafkaSourceFactory(properties={"bootstrap.servers": "h:1", "group.id": "g"},
                                                       topics=("hello",)))
    vertex = SimpleNamespace(id=b"v" * 16, name="Source: kafka", parallelism=2,
                             proto=SimpleNamespace(operators=[SimpleNamespace(coordinator=settings)]))
    old = KafkaSplitEnumerator(2, False, True)
    old.start()
    old.discovered([KafkaSplit("hello", p, 0, None) for p in range(3)])
    core = SimpleNamespace(graph=SimpleNamespace(job_vertices=[vertex]), executions={},
                           restore_point=SimpleNamespace(checkpoint_id=4, coordinator_states={vertex.id.hex(): old.snapshot(4)}))
    spawned: list[Any] = []
    c = SourceCoordinators(core, FakeGateways({}), lambda message: None, spawned.append)  # type: ignore[arg-type]
    enumerator = c._vertices[vertex.id.hex()].enumerator
    c.follow_parallelism()  # same parallelism: the enumerator goes on as it is
    assert enumerator.parallelism == 2 and not enumerator.unassigned
    vertex.parallelism = 3  # the adaptive scheduler rescaled the job
    c.follow_parallelism()
    assert enumerator.parallelism == 3 and set(enumerator.unassigned) == {("hello", p) for p in range(3)}
    for coroutine in spawned:
        coroutine.close()  # the discoveries would ask a broker
