"""Two-input operators: connected streams and broadcast state (Flink's CoStreamMap, CoStreamFlatMap,
CoProcessOperator, KeyedCoProcessOperator, CoBroadcastWithNonKeyedOperator, CoBroadcastWithKeyedOperator).

The chain hands each input batch to ``process_batch1`` (input 0) or ``process_batch2`` (input 1),
by the input index its JobEdge carries. A two-input operator is never chained to its inputs, so it
is always the head of its chain. Keyed variants key every record with its own input's selector
(``ctx.key_selector`` for input 0, ``ctx.key_selector2`` for input 1) into one backend, so state
and timers of a key are shared by both inputs. A keyed broadcast operator keys only input 0: the
broadcast side has no current key, and keyed state is unreachable there.

Broadcast state is operator state (see ``runtime/state/broadcast.py``): ``snapshot_state`` returns
its maps, and ``broadcast_operator_state`` tells a rescaled restore that every subtask takes one
copy instead of the round-robin share of list state.

A two-input operator's watermark is the minimum of its inputs' (idle inputs excluded); outputs
carry the timestamp of the record that produced them, as in the one-input operators.
"""
from __future__ import annotations

import itertools
from typing import Any, Callable

from millstream.datastream import functions as fn
from millstream.runtime import operator_factories
from millstream.runtime.operators.base import LONG_MIN, OperatorContext, StreamOperator
from millstream.runtime.operators.process import (
    KeyedProcessOperator,
    _KeyedContext,
    _KeyedTimerService,
    _NonKeyedTimerService,
    _ProcessBase,
    _ProcessContext,
)
from millstream.runtime.state.broadcast import BroadcastStates
from millstream.runtime.state.heap_backend import KeyedStateBackend
from millstream.runtime.timestamps import LONG_MAX, repeated, stamped, timestamps_of

__all__ = [
    "TwoInputOperator", "CoMapOperator", "CoFlatMapOperator", "KeyedCoMapOperator", "KeyedCoFlatMapOperator",
    "CoProcessOperator", "KeyedCoProcessOperator", "BroadcastProcessOperator", "KeyedBroadcastProcessOperator",
    "create_two_input_operator",
]

_flatten = itertools.chain.from_iterable


class TwoInputOperator(StreamOperator):
    """An operator with two logical inputs; the chain calls ``process_batch1`` / ``process_batch2``."""

    def process_batch(self, records: list[Any]) -> None:
        raise TypeError(f"Operator '{self.name}' has two inputs: records must name their input (0 or 1)")

    def process_batch1(self, records: list[Any]) -> None:
        self._run(records, 0)

    def process_batch2(self, records: list[Any]) -> None:
        self._run(records, 1)

    def _run(self, records: list[Any], i: int) -> None:
        """A batch of input ``i`` (0 or 1), for operators that treat both inputs alike."""
        raise NotImplementedError

    # Each input's watermark and idleness (Flink's processWatermark1/2): the operator's watermark is
    # the minimum over the inputs that are not idle; it is idle when both are.
    _input_watermarks: tuple[int, int] = (LONG_MIN, LONG_MIN)
    _input_idle: tuple[bool, bool] = (False, False)

    def process_input_watermark(self, watermark: int, input_index: int) -> None:
        marks = list(self._input_watermarks)
        marks[input_index] = max(marks[input_index], watermark)
        self._input_watermarks = (marks[0], marks[1])
        self._advance_combined()

    def process_input_watermark_status(self, idle: bool, input_index: int) -> None:
        was_idle = all(self._input_idle)
        flags = list(self._input_idle)
        flags[input_index] = idle
        self._input_idle = (flags[0], flags[1])
        if all(self._input_idle) != was_idle:
            self.process_watermark_status(not was_idle)
        if not idle or not all(self._input_idle):
            self._advance_combined()

    def _advance_combined(self) -> None:
        active = [w for w, idle in zip(self._input_watermarks, self._input_idle) if not idle]
        if active:
            self.process_watermark(min(active))


# -- co-map and co-flat-map --------------------------------------------------------------------


class CoMapOperator(TwoInputOperator):
    def __init__(self, factory: operator_factories.CoMapFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self._fns = (factory.function.map1, factory.function.map2)

    def _run(self, records: list[Any], i: int) -> None:
        try:
            out = list(map(self._fns[i], records))
        except Exception as e:
            self.fail(e, f"map{i + 1}")
        self.output(stamped(out, timestamps_of(records)))


class CoFlatMapOperator(TwoInputOperator):
    def __init__(self, factory: operator_factories.CoFlatMapFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self._fns = (factory.function.flat_map1, factory.function.flat_map2)

    def _run(self, records: list[Any], i: int) -> None:
        ts = timestamps_of(records)
        try:
            if ts is None:
                out = list(_flatten(r for r in map(self._fns[i], records) if r is not None))
            else:
                out = repeated([[] if r is None else list(r) for r in map(self._fns[i], records)], ts)
        except Exception as e:
            self.fail(e, f"flat_map{i + 1}")
        if out:
            self.output(out)


class _KeyedCoRecordOperator(TwoInputOperator):
    """Co-map / co-flat-map on keyed connected streams: the function may use keyed state."""

    def __init__(self, factory: Any, ctx: OperatorContext, fns: tuple[Callable[[Any], Any], Callable[[Any], Any]],
                 what: str) -> None:
        super().__init__(factory, ctx)
        self._state = self._backend()
        if ctx.key_selector2 is None:
            raise ValueError(f"Operator '{self.name}': a keyed two-input operator needs both inputs' key selectors")
        self._fns = fns
        self._what = what

    def _run(self, records: list[Any], i: int) -> None:
        keys, key_groups = self.key_batch(records, i)
        b, f = self._state, self._fns[i]
        results: list[Any] = []
        try:
            for key, kg, r in zip(keys, key_groups, records):
                b.current_key, b.current_key_group = key, kg
                results.append(f(r))
        except Exception as e:
            self.fail(e, f"{self._what}{i + 1}")
        self._emit_results(results, timestamps_of(records))

    def _emit_results(self, results: list[Any], ts: list[int | None] | None) -> None:
        self.output(stamped(results, ts))


class KeyedCoMapOperator(_KeyedCoRecordOperator):
    def __init__(self, factory: operator_factories.CoMapFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx, (factory.function.map1, factory.function.map2), "map")


class KeyedCoFlatMapOperator(_KeyedCoRecordOperator):
    def __init__(self, factory: operator_factories.CoFlatMapFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx, (factory.function.flat_map1, factory.function.flat_map2), "flat_map")

    def _emit_results(self, results: list[Any], ts: list[int | None] | None) -> None:
        if ts is None:
            out = list(_flatten(r for r in results if r is not None))
        else:
            out = repeated([[] if r is None else list(r) for r in results], ts)
        if out:
            self.output(out)


# -- co-process --------------------------------------------------------------------------------


class CoProcessOperator(_ProcessBase, TwoInputOperator):
    """A CoProcessFunction on connected streams that are not both keyed: no keyed state, no timers."""

    def __init__(self, factory: operator_factories.CoProcessFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self._ctx = _ProcessContext(self, _NonKeyedTimerService(ctx.env, self))
        self._process = (self._fn.process_element1, self._fn.process_element2)

    def _run(self, records: list[Any], i: int) -> None:
        self._loop(records, self._process[i], self._ctx, f"process_element{i + 1}")


class KeyedCoProcessOperator(KeyedProcessOperator, TwoInputOperator):
    """A (Keyed)CoProcessFunction on keyed connected streams: keyed state and timers of the current
    key, which is the record's key under its own input's selector. Timers fire as in
    KeyedProcessOperator (whose timer machinery this shares): processing time when due, event time
    as the combined watermark passes them."""

    def __init__(self, factory: operator_factories.CoProcessFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)  # type: ignore[arg-type]
        if ctx.key_selector2 is None:
            raise ValueError(f"Operator '{self.name}': a keyed two-input operator needs both inputs' key selectors")
        self._process = (self._fn.process_element1, self._fn.process_element2)

    def process_batch(self, records: list[Any]) -> None:
        TwoInputOperator.process_batch(self, records)

    def _run(self, records: list[Any], i: int) -> None:
        self._ctx.domain = None
        self._loop(records, self._process[i], self._ctx, f"process_element{i + 1}", self.key_batch(records, i))

    def process_watermark(self, watermark: int) -> None:
        """With the factory's ``watermark_delay``, timers fire at the input watermark and the output
        watermark trails it by the delay (the final one, ``LONG_MAX``, passes as it is)."""
        delay = getattr(self.factory, "watermark_delay", 0)
        if not delay:
            super().process_watermark(watermark)
            return
        if watermark <= self.current_watermark:
            return
        self.current_watermark = watermark
        self.on_event_time(watermark)
        self.watermark_output(watermark if watermark >= LONG_MAX else watermark - delay)


# -- broadcast state ---------------------------------------------------------------------------


class _BroadcastSideContext:
    """What the two non-keyed broadcast contexts share; ``writable``: the broadcast state's view."""

    writable = False

    def __init__(self, operator: "_BroadcastMixin") -> None:
        self._operator = operator

    def timestamp(self) -> int | None:
        return self._operator.stamp

    def current_processing_time(self) -> int:
        return self._operator.ctx.env.now_ms()

    def current_watermark(self) -> int:
        return self._operator.current_watermark

    def get_broadcast_state(self, state_descriptor: Any) -> Any:
        states = self._operator.broadcast_states
        return states.writable(state_descriptor) if self.writable else states.read_only(state_descriptor)

    def output(self, output_tag: Any, value: Any) -> None:
        self._operator.side_output(output_tag.tag_id, value)


class _BroadcastContext(_BroadcastSideContext, fn.KeyedBroadcastProcessFunction.Context,
                        fn.BroadcastProcessFunction.Context):
    """The broadcast side's context: writable broadcast state, no key."""

    writable = True


class _ReadOnlyContext(_BroadcastSideContext, fn.BroadcastProcessFunction.ReadOnlyContext):
    """The non-keyed data side's context: read-only broadcast state."""


# time_domain() is None outside on_timer (see _KeyedContext), which OnTimerContext does not declare
class _KeyedReadOnlyContext(_KeyedContext, fn.KeyedBroadcastProcessFunction.OnTimerContext):  # type: ignore[misc]
    """The keyed data side's context (and, with a timer set, ``on_timer``'s): read-only broadcast
    state, the current key and its timers."""

    def __init__(self, operator: "KeyedBroadcastProcessOperator", timers: fn.TimerService,
                 backend: KeyedStateBackend) -> None:
        super().__init__(operator, timers, backend)
        self._broadcast_operator = operator

    def current_processing_time(self) -> int:
        return self._broadcast_operator.ctx.env.now_ms()

    def current_watermark(self) -> int:
        return self._broadcast_operator.current_watermark

    def get_broadcast_state(self, state_descriptor: Any) -> Any:
        return self._broadcast_operator.broadcast_states.read_only(state_descriptor)


class _BroadcastMixin(_ProcessBase, TwoInputOperator):
    """Broadcast state and the broadcast side (input 1), shared by the keyed and non-keyed operators."""

    broadcast_operator_state = True

    def _init_broadcast(self, factory: operator_factories.BroadcastProcessFactory) -> None:
        self.broadcast_states = BroadcastStates(factory.descriptors, self.name)
        self._broadcast_ctx = _BroadcastContext(self)

    def process_batch2(self, records: list[Any]) -> None:
        self._before_broadcast_side()
        self._loop(records, self._fn.process_broadcast_element, self._broadcast_ctx, "process_broadcast_element")

    def _before_broadcast_side(self) -> None:
        pass

    def snapshot_state(self, checkpoint_id: int) -> Any:
        maps = self.broadcast_states.snapshot()
        return None if maps is None else {"broadcast": maps}

    def initialize_state(self, state: Any) -> None:
        if not isinstance(state, dict) or "broadcast" not in state:
            raise ValueError(f"Operator '{self.name}': the restored operator state is not broadcast state")
        self.broadcast_states.restore(state["broadcast"])


class BroadcastProcessOperator(_BroadcastMixin):
    """A BroadcastProcessFunction: input 0 sees the broadcast state read-only, input 1 (on every
    parallel instance) may change it. No keyed state, no timers."""

    def __init__(self, factory: operator_factories.BroadcastProcessFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self._init_broadcast(factory)
        self._ctx = _ReadOnlyContext(self)

    def process_batch1(self, records: list[Any]) -> None:
        self._loop(records, self._fn.process_element, self._ctx, "process_element")


class KeyedBroadcastProcessOperator(_BroadcastMixin, KeyedProcessOperator):
    """A KeyedBroadcastProcessFunction: input 0 (keyed) has keyed state, timers and read-only
    broadcast state; input 1 has writable broadcast state and no key."""

    def __init__(self, factory: operator_factories.BroadcastProcessFactory, ctx: OperatorContext) -> None:
        KeyedProcessOperator.__init__(self, factory, ctx)  # type: ignore[arg-type]
        self._init_broadcast(factory)
        self._ctx = _KeyedReadOnlyContext(self, _KeyedTimerService(ctx.env, self._state, self), self._state)

    def process_batch(self, records: list[Any]) -> None:
        TwoInputOperator.process_batch(self, records)

    # The keyed data side is a KeyedProcessOperator's input, read-only broadcast state in its context.
    process_batch1 = KeyedProcessOperator.process_batch

    def _before_broadcast_side(self) -> None:
        b = self._state  # no current key on the broadcast side: keyed state access fails clearly
        b.current_key, b.current_key_group = None, -1


def create_two_input_operator(factory: operator_factories.OperatorFactory, ctx: OperatorContext) -> StreamOperator | None:
    """The runtime operator of a two-input factory (keyed when the chain gave it a key selector), or
    None when ``factory`` is not a two-input one."""
    keyed = ctx.key_selector is not None
    if isinstance(factory, operator_factories.CoMapFactory):
        return KeyedCoMapOperator(factory, ctx) if keyed else CoMapOperator(factory, ctx)
    if isinstance(factory, operator_factories.CoFlatMapFactory):
        return KeyedCoFlatMapOperator(factory, ctx) if keyed else CoFlatMapOperator(factory, ctx)
    if isinstance(factory, operator_factories.CoProcessFactory):
        return KeyedCoProcessOperator(factory, ctx) if keyed else CoProcessOperator(factory, ctx)
    if isinstance(factory, operator_factories.BroadcastProcessFactory):
        return KeyedBroadcastProcessOperator(factory, ctx) if keyed else BroadcastProcessOperator(factory, ctx)
    return None
