"""A real JobManager and TaskManagers (in-process gRPC servers, one shared Spark) running jobs."""
from __future__ import annotations

import time
import uuid

import grpc
import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.client.execution import JobExecutionException
from millstream.client.minicluster import MiniCluster
from millstream.datastream import MapFunction, RuntimeContext, StreamExecutionEnvironment

from millstream.runtime.execution_state import JobStatus
from millstream.proto import cluster_pb2 as cpb

from .harness import ClusterSpec, all_slots_free, fast_config, job_status, jobmanager_env, poll_for
from .jobs import ParallelEndless

pytestmark = pytest.mark.timeout(120)
CLUSTER = ClusterSpec(taskmanagers=2)  # two TaskManagers with two slots each


class Tagged(MapFunction):
    """Records which subtask saw each element: proves open() got the runtime context."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.index = runtime_context.get_index_of_this_subtask()
        self.parallelism = runtime_context.get_number_of_parallel_subtasks()

    def map(self, value):
        return (value * 2, self.index, self.parallelism)


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_a_job_runs_to_finished_and_returns_its_results(cluster, client, parallelism: int) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    stream = env.from_sequence(1, 1000).map(Tagged()).filter(lambda t: t[0] % 3 != 0)
    with jobmanager_env(cluster.address):
        with stream.execute_and_collect(f"p{parallelism}") as results:
            rows = list(results)
    assert sorted(r[0] for r in rows) == [2 * x for x in range(1, 1001) if (2 * x) % 3 != 0]
    assert {r[1] for r in rows} == set(range(parallelism))
    assert {r[2] for r in rows} == {parallelism}
    poll_for(lambda: all_slots_free(client), 10, what="slots to be freed")


def test_execute_returns_a_result_and_print_goes_to_the_task_manager(cluster, capfd) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.from_sequence(1, 4).map(lambda x: f"value-{x}").print()
    with jobmanager_env(cluster.address):
        result = env.execute("print job")
    assert len(result.get_job_id()) == 32 and result.get_net_runtime() >= 0
    out = poll_for(lambda: (o := capfd.readouterr().out) and o, 5, what="printed lines")
    assert sorted(line for line in out.splitlines() if "value-" in line) == ["1> value-1", "1> value-2", "2> value-3", "2> value-4"]


class Boom(MapFunction):
    def map(self, value):
        if value == 7:
            raise ValueError(f"cannot handle {value}")
        return value


def test_a_failing_task_fails_the_job_with_the_users_traceback(cluster, client) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.from_sequence(1, 10).map(Boom()).name("boom").print()
    with jobmanager_env(cluster.address), pytest.raises(JobExecutionException) as info:
        env.execute("failing job")
    message = str(info.value)
    assert "FAILED" in message and "ValueError: cannot handle 7" in message
    assert "in map" in message and "Traceback" in message  # the user's frame, from the worker
    assert info.value.summary.failure.task_name.startswith("Source: Sequence Source -> boom")
    poll_for(lambda: all_slots_free(client), 10, what="slots to be freed")


def _submit_endless(client: ClusterClient, parallelism: int, name: str) -> bytes:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.add_source(ParallelEndless()).map(lambda x: x).add_sink(lambda x: None)
    return client.submit(env.get_job_graph(name).proto)


def test_cancel_reaches_canceled_and_frees_the_slots(client) -> None:
    job_id = _submit_endless(client, 2, "endless")
    poll_for(lambda: client.status(job_id).tasks_per_state.get("RUNNING") == 2, 20, what="both tasks running")
    client.cancel(job_id)
    poll_for(lambda: job_status(client, job_id) is JobStatus.CANCELED, 15, what="CANCELED")
    poll_for(lambda: all_slots_free(client), 10, what="slots to be freed")


def test_a_job_waits_for_slots_until_another_task_manager_registers(spark) -> None:
    with MiniCluster(fast_config(), num_slots=2, spark=spark) as mc, ClusterClient(mc.address) as client:
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(4)
        env.from_sequence(1, 100).map(lambda x: x).add_sink(lambda x: None)
        job_id = client.submit(env.get_job_graph("needs four").proto)
        time.sleep(0.5)  # give the scheduler a chance to (wrongly) deploy on two slots
        summary = client.status(job_id)
        assert JobStatus.from_proto(summary.status) is JobStatus.RUNNING
        assert summary.tasks_per_state.get("SCHEDULED") == 4
        mc.add_task_manager()
        poll_for(lambda: job_status(client, job_id) is JobStatus.FINISHED, 30, what="FINISHED")


def test_a_job_needing_more_slots_than_the_cluster_has_fails_clearly(spark) -> None:
    config = fast_config(**{"slot__request__timeout": "1 s"})
    with MiniCluster(config, num_slots=2, spark=spark) as mc, ClusterClient(mc.address) as client:
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(5)
        env.from_sequence(1, 10).add_sink(lambda x: None)
        job_id = client.submit(env.get_job_graph("too wide").proto)
        poll_for(lambda: job_status(client, job_id) is JobStatus.FAILED, 15, what="FAILED")
        message = client.status(job_id).failure.message
        assert "not enough slots" in message and "5 slots" in message and "2 slots in total" in message
        # The cluster keeps serving.
        env = StreamExecutionEnvironment.get_execution_environment()
        env.from_sequence(1, 10).add_sink(lambda x: None)
        ok = client.submit(env.get_job_graph("fits").proto)
        poll_for(lambda: job_status(client, ok) is JobStatus.FINISHED, 30, what="FINISHED")


# -- bad input -------------------------------------------------------------------------------


def _graph(parallelism: int = 1):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.from_sequence(1, 10).rebalance().map(lambda x: x).add_sink(lambda x: None)
    return env.get_job_graph("graph").proto


def _submit_raw(client: ClusterClient, job_graph, submission_id: str = "") -> bytes:
    request = cpb.SubmitJobRequest(submission_id=submission_id or uuid.uuid4().hex, job_graph=job_graph.SerializeToString())
    return client._stub.SubmitJob(request, timeout=5).job_id


def _expect(client: ClusterClient, job_graph, code: grpc.StatusCode, fragment: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        _submit_raw(client, job_graph)
    assert info.value.code() is code
    assert fragment in info.value.details()


def test_malformed_job_graphs_are_rejected_with_the_problem_named(client) -> None:
    from millstream.proto import jobgraph_pb2 as pb

    _expect(client, pb.JobGraph(), grpc.StatusCode.INVALID_ARGUMENT, "no vertices")
    g = _graph()
    del g.vertices[0].operators[:]
    _expect(client, g, grpc.StatusCode.INVALID_ARGUMENT, "has no operators")
    g = _graph()
    g.vertices[1].inputs[0].source_vertex = b"\x01" * 16
    _expect(client, g, grpc.StatusCode.INVALID_ARGUMENT, "unknown vertex")
    g = _graph()
    g.vertices[0].inputs.add().CopyFrom(g.vertices[1].inputs[0])
    g.vertices[0].inputs[0].source_vertex = g.vertices[1].id
    _expect(client, g, grpc.StatusCode.INVALID_ARGUMENT, "cycle")
    g = _graph()
    g.vertices[1].parallelism = 0
    _expect(client, g, grpc.StatusCode.INVALID_ARGUMENT, "parallelism 0")
    assert client.overview().taskmanagers == 2  # still serving


def test_an_undecodable_job_graph_is_rejected(client) -> None:
    request = cpb.SubmitJobRequest(submission_id="garbage", job_graph=b"\xff\xff\xff\xff garbage")
    with pytest.raises(grpc.RpcError) as info:
        client._stub.SubmitJob(request, timeout=5)
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "cannot be decoded" in info.value.details()


def test_a_running_job_id_cannot_be_submitted_twice_but_a_retry_is_idempotent(client) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.add_source(ParallelEndless()).add_sink(lambda x: None)
    graph = env.get_job_graph("dup").proto
    first = _submit_raw(client, graph, submission_id="retry-me")
    again = client._stub.SubmitJob(
        cpb.SubmitJobRequest(submission_id="retry-me", job_graph=graph.SerializeToString()), timeout=5
    )
    assert again.job_id == first and again.duplicate
    with pytest.raises(grpc.RpcError) as info:
        _submit_raw(client, graph, submission_id="another")
    assert info.value.code() is grpc.StatusCode.ALREADY_EXISTS
    client.cancel(first)
    poll_for(lambda: job_status(client, first) is JobStatus.CANCELED, 15, what="CANCELED")


def test_unknown_job_ids_are_not_found(client) -> None:
    with pytest.raises(grpc.RpcError) as info:
        client.status(b"\x00" * 16)
    assert info.value.code() is grpc.StatusCode.NOT_FOUND


def test_servers_answer_health_checks_and_reflection(cluster) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    for address in [cluster.address, *(tm.address for tm in cluster.task_managers)]:
        with grpc.insecure_channel(address) as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            request = reflection_pb2.ServerReflectionRequest(list_services="")
            (response,) = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(iter([request]), timeout=5)
            names = {s.name for s in response.list_services_response.service}
            assert "grpc.health.v1.Health" in names
            assert names & {"millstream.v1.Dispatcher", "millstream.v1.TaskExecutor"}
