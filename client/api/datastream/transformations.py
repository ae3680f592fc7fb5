"""Transformations: what each DataStream call records (Flink's ``Transformation`` tree).

A transformation knows its inputs, operator factory and the user's settings (name, uid,
parallelism, slot sharing group, chaining strategy). Partitioning, side outputs and unions are
*virtual*: they never become operators, the StreamGraph folds them into edges.
"""
from __future__ import annotations

import enum
from typing import Any, Sequence

from millstream.common.typeinfo import TypeInformation
from millstream.runtime.operator_factories import OperatorFactory
from millstream.runtime.partitioners import StreamPartitioner

UNSET = -1  # parallelism / max parallelism not set by the user


class ChainingStrategy(str, enum.Enum):
    ALWAYS = "ALWAYS"  # chains with its predecessor and successors
    HEAD = "HEAD"      # starts a chain: never chained to its predecessor (sources, start_new_chain)
    NEVER = "NEVER"    # never chained (disable_chaining)


class StreamExchangeMode(str, enum.Enum):
    PIPELINED = "PIPELINED"
    BATCH = "BATCH"
    UNDEFINED = "UNDEFINED"  # decided by the runtime mode: BATCH mode makes it blocking


class Transformation:
    def __init__(
        self,
        env: Any,
        name: str,
        inputs: Sequence["Transformation"] = (),
        parallelism: int = UNSET,
        output_type: TypeInformation | None = None,
    ) -> None:
        self.id: int = env._next_transformation_id()
        self.name = name
        self.inputs = list(inputs)
        self.parallelism = parallelism
        self.max_parallelism = UNSET
        self.output_type = output_type
        self.uid: str | None = None
        self.uid_hash: str | None = None
        self.slot_sharing_group: str | None = None
        self.chaining_strategy = ChainingStrategy.ALWAYS
        self.buffer_timeout: int | None = None
        self.side_output_types: dict[str, TypeInformation | None] = {}
        self.non_parallel = False  # force_non_parallel() / window_all: parallelism stays 1

    @property
    def is_virtual(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, id={self.id})"


class SourceTransformation(Transformation):
    def __init__(self, env: Any, name: str, factory: OperatorFactory, parallelism: int, output_type: Any) -> None:
        super().__init__(env, name, (), parallelism, output_type)
        self.factory = factory
        self.chaining_strategy = ChainingStrategy.HEAD


class OneInputTransformation(Transformation):
    def __init__(
        self,
        env: Any,
        name: str,
        input: Transformation,
        factory: OperatorFactory,
        parallelism: int,
        output_type: Any = None,
        state_key_selector: Any = None,
        state_key_type: Any = None,
    ) -> None:
        super().__init__(env, name, (input,), parallelism, output_type)
        self.factory = factory
        self.state_key_selector = state_key_selector
        self.state_key_type = state_key_type


class TwoInputTransformation(Transformation):
    """An operator over two inputs (connect): input 0 and input 1 stay apart up to the operator.
    Keyed when both inputs are keyed (``state_key_selector1`` / ``2``); a broadcast connect keys
    only the first (the broadcast side has no key)."""

    def __init__(
        self,
        env: Any,
        name: str,
        input1: Transformation,
        input2: Transformation,
        factory: OperatorFactory,
        parallelism: int,
        output_type: Any = None,
        state_key_selector1: Any = None,
        state_key_selector2: Any = None,
        state_key_type: Any = None,
    ) -> None:
        super().__init__(env, name, (input1, input2), parallelism, output_type)
        self.factory = factory
        self.state_key_selector1 = state_key_selector1
        self.state_key_selector2 = state_key_selector2
        self.state_key_type = state_key_type


class SinkTransformation(OneInputTransformation):
    pass


class PartitionTransformation(Transformation):
    def __init__(
        self,
        env: Any,
        input: Transformation,
        partitioner: StreamPartitioner,
        exchange_mode: StreamExchangeMode = StreamExchangeMode.UNDEFINED,
    ) -> None:
        super().__init__(env, "Partition", (input,), input.parallelism, input.output_type)
        self.partitioner = partitioner
        self.exchange_mode = exchange_mode

    @property
    def is_virtual(self) -> bool:
        return True


class SideOutputTransformation(Transformation):
    def __init__(self, env: Any, input: Transformation, tag_id: str, output_type: Any) -> None:
        super().__init__(env, "SideOutput", (input,), input.parallelism, output_type)
        self.tag_id = tag_id

    @property
    def is_virtual(self) -> bool:
        return True


class UnionTransformation(Transformation):
    def __init__(self, env: Any, inputs: Sequence[Transformation]) -> None:
        super().__init__(env, "Union", inputs, inputs[0].parallelism, inputs[0].output_type)

    @property
    def is_virtual(self) -> bool:
        return True
