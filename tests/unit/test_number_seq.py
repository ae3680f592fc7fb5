"""PyFlink's ``NumberSequenceSource(start, end)`` (Flink's FLIP-27 NumberSequenceSource): the numbers
``start..end`` inclusive, a bounded and parallel source whose range is split among the subtasks,
each number read exactly once; ``start > end`` is refused. It is also exported from
``pyflink.datastream.connectors``."""
from __future__ import annotations

from typing import Any

import pytest

from millstream.common import WatermarkStrategy
from millstream.datastream.connectors import NumberSequenceSource as ExportedNumberSequenceSource
from millstream.datastream.connectors.number_seq import NumberSequenceSource
from millstream.runtime.operators.sources import create_source_reader
from millstream.runtime.task.environment import ManualClock, SimpleTaskEnvironment, StreamingRuntimeContext


def _source_node(env: Any, name: str) -> Any:
    sg = env.get_stream_graph()
    (node,) = [sg.nodes[i] for i in sg.source_ids if sg.nodes[i].operator_name == f"Source: {name}"]
    return node


def _read_subtask(factory: Any, parallelism: int, subtask: int, positions: dict[str, Any] | None = None) -> list[Any]:
    task_env = SimpleTaskEnvironment(parallelism=parallelism, subtask_index=subtask, clock=ManualClock(0),
                                     source_batch_size=7)
    reader = create_source_reader(factory, task_env, StreamingRuntimeContext(task_env, "source", None), positions)
    reader.open()
    out: list[Any] = []
    while (batch := reader.poll()) is not None:
        out.extend(batch)
    return out


def test_exported_from_connectors_as_pyflink_does() -> None:
    assert ExportedNumberSequenceSource is NumberSequenceSource


def test_from_source_makes_a_bounded_source_at_the_environments_parallelism(env) -> None:
    env.set_parallelism(3)
    env.from_source(NumberSequenceSource(1, 100), WatermarkStrategy.no_watermarks(), "numbers").print()
    node = _source_node(env, "numbers")
    assert node.parallelism == 3
    assert node.factory.bounded and node.factory.parallel


@pytest.mark.parametrize("parallelism", [1, 2, 3, 4])
@pytest.mark.parametrize("start, end", [(1, 1000), (0, 0), (-5, 5), (10, 12)])
def test_the_subtasks_read_every_number_of_the_range_exactly_once(env, parallelism: int, start: int, end: int) -> None:
    env.set_parallelism(parallelism)
    env.from_source(NumberSequenceSource(start, end), WatermarkStrategy.no_watermarks(), "numbers").print()
    factory = _source_node(env, "numbers").factory
    read = [n for subtask in range(parallelism) for n in _read_subtask(factory, parallelism, subtask)]
    assert sorted(read) == list(range(start, end + 1))


def test_a_checkpointed_position_resumes_after_the_numbers_already_emitted(env) -> None:
    env.from_source(NumberSequenceSource(1, 20), WatermarkStrategy.no_watermarks(), "numbers").print()
    factory = _source_node(env, "numbers").factory
    task_env = SimpleTaskEnvironment(parallelism=1, subtask_index=0, clock=ManualClock(0), source_batch_size=5)
    reader = create_source_reader(factory, task_env, StreamingRuntimeContext(task_env, "source", None), None)
    reader.open()
    first = reader.poll()
    checkpointed = reader.position()
    assert first + _read_subtask(factory, 1, 0, checkpointed) == list(range(1, 21))


def test_start_after_end_is_refused_naming_both() -> None:
    with pytest.raises(ValueError, match="start <= end.*5..4"):
        NumberSequenceSource(5, 4)


@pytest.mark.parametrize("start, end", [(1.5, 3), ("1", 3), (1, None), (True, 3)])
def test_non_integer_bounds_are_refused(start: Any, end: Any) -> None:
    with pytest.raises(TypeError, match="NumberSequenceSource needs an int"):
        NumberSequenceSource(start, end)


def test_bounds_beyond_a_java_long_are_refused() -> None:
    NumberSequenceSource(-(2**63), 2**63 - 1)  # Flink's bounds are longs: the whole long range is allowed
    with pytest.raises(ValueError, match="end 9223372036854775808 does not fit a Java long"):
        NumberSequenceSource(0, 2**63)
    with pytest.raises(ValueError, match="start -9223372036854775809 does not fit a Java long"):
        NumberSequenceSource(-(2**63) - 1, 0)


def test_bounds_are_kept() -> None:
    source = NumberSequenceSource(-3, 7)
    assert (source.get_from(), source.get_to()) == (-3, 7)
