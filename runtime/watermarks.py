"""Event-time bookkeeping of a task, as pure objects: events in, watermarks and statuses out.

- :class:`StatusWatermarkValve`: a task's input side. Per input channel the last watermark and
  whether the channel is idle; the task's watermark is the minimum over active channels, only ever
  moves forward, and the task goes idle when every channel is (Flink's ``StatusWatermarkValve``).
- :class:`WatermarkOutputMultiplexer`: combines the watermarks of several splits read by one source
  subtask (minimum over the splits that are not idle).
- :class:`TimestampsAndWatermarks`: a source's (or ``assign_timestamps_and_watermarks``') side:
  applies a :class:`~millstream.common.watermark_strategy.WatermarkStrategy` to batches of records,
  returning their timestamps and the watermark events to send after them.
- :class:`WatermarkEmitter`: the output end of a generator; sends only advancing watermarks and
  status changes, in order.

Watermarks are integer milliseconds; statuses are :class:`WatermarkStatus`. Nothing here reads a
real clock except through the ``clock`` callables passed in, so all of it is tested without time.
"""
from __future__ import annotations

import enum
import heapq
import itertools
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Sequence

from millstream.common.watermark_strategy import (
    LONG_MAX,
    LONG_MIN,
    Clock,
    NoWatermarksGenerator,
    TimestampAssigner,
    WatermarkGenerator,
    WatermarkOutput,
    WatermarkStrategy,
    _FunctionTimestampAssigner,
    monotonic_millis,
)
from millstream.runtime.narrowing import ints_in_range
from millstream.runtime.subscripts import getter_of

__all__ = [
    "LONG_MAX", "LONG_MIN", "InputWatermarks", "StatusWatermarkValve", "TimestampsAndWatermarks", "WatermarkBatch",
    "WatermarkEmitter", "WatermarkEvent", "WatermarkOutputMultiplexer", "WatermarkStatus",
]

_INT_ONLY = frozenset((int,))  # the types of a batch of timestamps that needs no per-record check


def _timestamp_getter(assigner: TimestampAssigner | None) -> Callable[[Any], Any] | None:
    """``operator.itemgetter(c)`` when the assigner's ``extract_timestamp(value, record_timestamp)``
    (or the function given to ``with_timestamp_assigner``) is exactly ``value[c]``, else None."""
    if assigner is None:
        return None
    extract: Any = assigner.extract_timestamp
    if type(assigner) is _FunctionTimestampAssigner:
        extract = assigner.function
    return getter_of(extract, position=0, arity=2)


class WatermarkStatus(str, enum.Enum):
    """Whether a stream (channel, split, task output) is expected to advance its watermark. Also the
    network event a producer sends when its output goes idle or active again (Flink's
    WatermarkStatus is both, too)."""

    ACTIVE = "active"
    IDLE = "idle"

    @property
    def idle(self) -> bool:
        return self is WatermarkStatus.IDLE

    @staticmethod
    def of(idle: bool) -> "WatermarkStatus":
        return WatermarkStatus.IDLE if idle else WatermarkStatus.ACTIVE


WatermarkEvent = int | WatermarkStatus
"""What goes downstream, in order: a watermark (int milliseconds) or a status change."""


def _check_watermark(watermark: Any) -> int:
    if type(watermark) is not int:
        try:
            watermark = operator.index(watermark)
        except TypeError:
            raise TypeError(
                f"a watermark is integer milliseconds, got {watermark!r} ({type(watermark).__name__})"
            ) from None
    if not LONG_MIN <= watermark <= LONG_MAX:
        raise ValueError(f"watermark {watermark} is outside the 64-bit range [{LONG_MIN}, {LONG_MAX}]")
    return watermark


class WatermarkEmitter:
    """A :class:`WatermarkOutput` that queues what must go downstream.

    As Flink's ``WatermarkToDataOutput``: a watermark not above the last one is dropped; an advancing
    watermark on an idle output first marks it active; ``mark_idle``/``mark_active`` queue a status
    only when it changes. ``drain()`` hands over the queue.
    """

    def __init__(self) -> None:
        self.current_watermark = LONG_MIN
        self.idle = False
        self._pending: list[WatermarkEvent] = []

    def emit_watermark(self, watermark: int) -> None:
        watermark = _check_watermark(watermark)
        if watermark <= self.current_watermark:
            return
        self.current_watermark = watermark
        self.mark_active()
        pending = self._pending
        if pending and type(pending[-1]) is int:
            pending[-1] = watermark  # a later, higher watermark supersedes one not yet sent
        else:
            pending.append(watermark)

    def mark_idle(self) -> None:
        if not self.idle:
            self.idle = True
            self._pending.append(WatermarkStatus.IDLE)

    def mark_active(self) -> None:
        if self.idle:
            self.idle = False
            self._pending.append(WatermarkStatus.ACTIVE)

    def drain(self) -> list[WatermarkEvent]:
        out, self._pending = self._pending, []
        return out


# -- the input side: several channels into one task -----------------------------------------------


class _Channel:
    __slots__ = ("watermark", "active", "aligned")

    def __init__(self) -> None:
        self.watermark = LONG_MIN
        self.active = True
        # Aligned: active and caught up with the valve's output, so it takes part in the minimum.
        self.aligned = True


class StatusWatermarkValve:
    """Combines the watermarks and statuses of a task's input channels into the task's own.

    Rules (Flink's ``StatusWatermarkValve``):

    - every channel starts active at ``LONG_MIN``; the valve's output starts active at ``LONG_MIN``;
    - a watermark from an idle channel, or one not above that channel's last, is ignored;
    - the output watermark is the minimum over *aligned* channels (active, and caught up with the
      output), emitted only when it is above the last output: it never goes back;
    - a channel going idle leaves the minimum, which may let the output advance; when the last
      active channel goes idle while it held the minimum, the output advances to the maximum over
      all channels (nothing else will move it), and the valve emits IDLE;
    - a channel becoming active again rejoins the minimum only once its watermark has caught up
      with the output (it cannot pull the output back); the valve emits ACTIVE if it was idle;
    - the end of a channel's input (:meth:`end_of_input`) is a final ``LONG_MAX`` watermark from it.

    Each method returns the events the task must forward, in order.
    """

    def __init__(self, num_channels: int) -> None:
        if num_channels < 1:
            raise ValueError(f"a watermark valve needs at least one input channel, got {num_channels}")
        self._channels = [_Channel() for _ in range(num_channels)]
        # Min-heap of (watermark, channel) over aligned channels. Entries go stale when a channel's
        # watermark moves or it leaves alignment; stale tops are dropped on peek, and the heap is
        # rebuilt when stale entries pile up, so each update costs O(log n).
        self._heap: list[tuple[int, int]] = [(LONG_MIN, i) for i in range(num_channels)]
        self.last_output_watermark = LONG_MIN
        self.idle = False

    @property
    def num_channels(self) -> int:
        return len(self._channels)

    def channel_watermark(self, channel: int) -> int:
        return self._channel(channel).watermark

    def input_watermark(self, watermark: int, channel: int) -> list[WatermarkEvent]:
        """A watermark arrived on ``channel``."""
        ch = self._channel(channel)
        watermark = _check_watermark(watermark)
        out: list[WatermarkEvent] = []
        if self.idle or not ch.active or watermark <= ch.watermark:
            return out
        ch.watermark = watermark
        if ch.aligned:
            self._push(ch, channel)
        elif watermark >= self.last_output_watermark:
            self._align(ch, channel)  # a channel that was behind has caught up
        self._output_new_min(out)
        return out

    def input_watermark_status(self, status: WatermarkStatus, channel: int) -> list[WatermarkEvent]:
        """``channel`` reports it became idle or active; only a change of its status counts."""
        ch = self._channel(channel)
        status = WatermarkStatus(status)
        out: list[WatermarkEvent] = []
        if status is WatermarkStatus.IDLE and ch.active:
            ch.active = False
            ch.aligned = False
            if not any(c.active for c in self._channels):
                # Nothing will advance the watermark any more: flush to the highest channel, unless
                # an earlier channel going idle already moved the output past this one.
                if ch.watermark == self.last_output_watermark:
                    highest = max(c.watermark for c in self._channels)
                    if highest > self.last_output_watermark:
                        self.last_output_watermark = highest
                        out.append(highest)
                self.idle = True
                out.append(WatermarkStatus.IDLE)
            elif ch.watermark == self.last_output_watermark:
                self._output_new_min(out)  # it may have been holding the minimum back
        elif status is WatermarkStatus.ACTIVE and not ch.active:
            ch.active = True
            if ch.watermark >= self.last_output_watermark:
                self._align(ch, channel)
            if self.idle:
                self.idle = False
                out.append(WatermarkStatus.ACTIVE)
        return out

    def end_of_input(self, channel: int) -> list[WatermarkEvent]:
        """``channel`` has no more data: it holds nothing back (a ``LONG_MAX`` watermark, sent as the
        upstream would: active first if it was idle). Repeating it changes nothing."""
        out: list[WatermarkEvent] = []
        if not self._channel(channel).active:
            out += self.input_watermark_status(WatermarkStatus.ACTIVE, channel)
        out += self.input_watermark(LONG_MAX, channel)
        return out

    # -- internals -------------------------------------------------------------------------------

    def _channel(self, channel: int) -> _Channel:
        if not 0 <= channel < len(self._channels):
            raise IndexError(f"input channel {channel} does not exist: this valve has {len(self._channels)}")
        return self._channels[channel]

    def _push(self, ch: _Channel, index: int) -> None:
        heap = self._heap
        heapq.heappush(heap, (ch.watermark, index))
        if len(heap) > 2 * len(self._channels) + 8:
            self._heap = [(c.watermark, i) for i, c in enumerate(self._channels) if c.aligned]
            heapq.heapify(self._heap)

    def _align(self, ch: _Channel, index: int) -> None:
        ch.aligned = True
        self._push(ch, index)

    def _min_aligned(self) -> int | None:
        heap, channels = self._heap, self._channels
        while heap:
            watermark, index = heap[0]
            ch = channels[index]
            if ch.aligned and ch.watermark == watermark:
                return watermark
            heapq.heappop(heap)
        return None

    def _output_new_min(self, out: list[WatermarkEvent]) -> None:
        low = self._min_aligned()
        if low is not None and low > self.last_output_watermark:
            self.last_output_watermark = low
            out.append(low)


class InputWatermarks:
    """A task's input side: one :class:`StatusWatermarkValve` per logical input (a two-input
    operator has two), over the channels of that input. ``input_of_channel[i]`` is the input index
    of gate channel ``i``. Each method returns ``(input_index, event)`` pairs to hand to the chain."""

    def __init__(self, input_of_channel: Sequence[int]) -> None:
        counts: dict[int, int] = {}
        self._route: list[tuple[int, int]] = []  # per gate channel: (input index, channel within the input)
        for input_index in input_of_channel:
            self._route.append((input_index, counts.get(input_index, 0)))
            counts[input_index] = counts.get(input_index, 0) + 1
        self.valves = {input_index: StatusWatermarkValve(n) for input_index, n in counts.items()}

    def _out(self, input_index: int, events: list[WatermarkEvent]) -> list[tuple[int, WatermarkEvent]]:
        return [(input_index, event) for event in events]

    def watermark(self, channel: int, watermark: int) -> list[tuple[int, WatermarkEvent]]:
        input_index, local = self._route[channel]
        return self._out(input_index, self.valves[input_index].input_watermark(watermark, local))

    def status(self, channel: int, idle: bool) -> list[tuple[int, WatermarkEvent]]:
        input_index, local = self._route[channel]
        status = WatermarkStatus.IDLE if idle else WatermarkStatus.ACTIVE
        return self._out(input_index, self.valves[input_index].input_watermark_status(status, local))

    def end_of_input(self, channel: int) -> list[tuple[int, WatermarkEvent]]:
        input_index, local = self._route[channel]
        return self._out(input_index, self.valves[input_index].end_of_input(local))


# -- several splits in one source subtask ---------------------------------------------------------


class _PartialWatermark:
    __slots__ = ("watermark", "idle")

    def __init__(self) -> None:
        self.watermark = LONG_MIN
        self.idle = False

    def set_watermark(self, watermark: int) -> bool:
        """Records ``watermark`` (clearing idleness); True when it advanced."""
        self.idle = False
        if watermark > self.watermark:
            self.watermark = watermark
            return True
        return False


class WatermarkOutputMultiplexer:
    """Combines the watermark outputs of several splits into one underlying output (Flink's
    ``WatermarkOutputMultiplexer``): the combined watermark is the minimum over splits that are not
    idle, never goes back, and the underlying output is marked idle when every split is idle.

    An *immediate* output of a split may update the combined watermark at once (generators'
    ``on_event``); a *deferred* one only records, and :meth:`on_periodic_emit` combines (periodic
    emission, so one round of ``on_periodic_emit`` over all splits yields one combined update).
    """

    def __init__(self, underlying: WatermarkOutput) -> None:
        self.underlying = underlying
        self._outputs: dict[Hashable, _PartialWatermark] = {}
        self.combined_watermark = LONG_MIN
        self.idle = False

    def register_new_output(self, output_id: Hashable) -> None:
        if output_id in self._outputs:
            raise ValueError(f"the watermark multiplexer already has an output for {output_id!r}")
        self._outputs[output_id] = _PartialWatermark()

    def unregister_output(self, output_id: Hashable) -> bool:
        return self._outputs.pop(output_id, None) is not None

    def get_immediate_output(self, output_id: Hashable) -> WatermarkOutput:
        return _ImmediateOutput(self, self._state(output_id))

    def get_deferred_output(self, output_id: Hashable) -> WatermarkOutput:
        return _DeferredOutput(self._state(output_id))

    def on_periodic_emit(self) -> None:
        self._update_combined_watermark()

    def _state(self, output_id: Hashable) -> _PartialWatermark:
        try:
            return self._outputs[output_id]
        except KeyError:
            raise KeyError(f"no watermark output registered under {output_id!r}") from None

    def _update_combined_watermark(self) -> None:
        if not self._outputs:
            return  # no splits: nothing to combine (and never emit the empty minimum)
        active = [p.watermark for p in self._outputs.values() if not p.idle]
        self.idle = not active
        if active and min(active) > self.combined_watermark:
            self.combined_watermark = min(active)
            self.underlying.emit_watermark(self.combined_watermark)
        elif self.idle:
            self.underlying.mark_idle()


@dataclass
class _ImmediateOutput:
    multiplexer: WatermarkOutputMultiplexer
    state: _PartialWatermark

    def emit_watermark(self, watermark: int) -> None:
        if self.state.set_watermark(watermark) and watermark > self.multiplexer.combined_watermark:
            self.multiplexer._update_combined_watermark()

    def mark_idle(self) -> None:
        self.state.idle = True
        self.multiplexer._update_combined_watermark()  # this split may have held the others back

    def mark_active(self) -> None:
        self.state.idle = False
        self.multiplexer._update_combined_watermark()


@dataclass
class _DeferredOutput:
    state: _PartialWatermark

    def emit_watermark(self, watermark: int) -> None:
        self.state.set_watermark(watermark)

    def mark_idle(self) -> None:
        self.state.idle = True

    def mark_active(self) -> None:
        self.state.idle = False


# -- applying a strategy to records ----------------------------------------------------------------


@dataclass
class WatermarkBatch:
    """What :meth:`TimestampsAndWatermarks.process_batch` produced for one batch of records."""

    timestamps: list[int | None]  # per record; None only without an assigner for a record that had none
    events: list[WatermarkEvent] = field(default_factory=list)  # to send after the records, in order


@dataclass
class _SplitOutput:
    generator: WatermarkGenerator
    immediate: WatermarkOutput
    deferred: WatermarkOutput


class TimestampsAndWatermarks:
    """Applies a watermark strategy in a task (Flink's ``ProgressiveTimestampsAndWatermarks`` for
    sources and ``TimestampsAndWatermarksOperator`` for ``assign_timestamps_and_watermarks``).

    Per record: the assigner's timestamp (``record_timestamp`` is ``LONG_MIN`` when the record has
    none), then the generator's ``on_event``. Periodically (every ``auto_watermark_interval_ms`` of
    ``clock``; 0 disables it, as Flink's ``pipeline.auto-watermark-interval``) the generator's
    ``on_periodic_emit``. Records read from named splits use one generator per split, combined by a
    :class:`WatermarkOutputMultiplexer`. The end of input emits the final ``LONG_MAX`` watermark.
    """

    def __init__(
        self,
        strategy: WatermarkStrategy,
        *,
        auto_watermark_interval_ms: int = 200,
        clock: Clock | None = None,
        emit_progressive_watermarks: bool = True,
    ) -> None:
        if auto_watermark_interval_ms < 0:
            raise ValueError(f"the auto watermark interval cannot be negative, got {auto_watermark_interval_ms} ms")
        self.strategy = strategy
        self.assigner: TimestampAssigner | None = strategy.timestamp_assigner
        self._timestamp_field = _timestamp_getter(self.assigner)
        self.clock = clock or monotonic_millis
        self.interval_ms = auto_watermark_interval_ms
        self.progressive = emit_progressive_watermarks
        self.output = WatermarkEmitter()
        self.main_generator = self._new_generator()
        self._main_used = False
        self._multiplexer = WatermarkOutputMultiplexer(self.output)
        self._splits: dict[Hashable, _SplitOutput] = {}
        self._last_periodic = self.clock()
        self.finished = False

    # -- records -------------------------------------------------------------------------------

    def process_batch(
        self, values: Sequence[Any], timestamps: Sequence[int | None] | None = None, split: Hashable | None = None
    ) -> WatermarkBatch:
        """Timestamps for ``values`` (with their current ``timestamps``, or none), fed to the
        generator of ``split`` (the main one when None). The events are what the generator emitted
        on the events themselves (punctuated); periodic watermarks come from :meth:`emit_periodic`."""
        if timestamps is not None and len(timestamps) != len(values):
            raise ValueError(f"{len(values)} records but {len(timestamps)} timestamps")
        assigned = self._assign(values, timestamps)
        if self.progressive and values:
            # with an assigner every timestamp is an int (checked): a copy for the generator
            event_times: list[int] = (list(assigned) if self.assigner is not None  # type: ignore[arg-type]
                                      else [LONG_MIN if t is None else t for t in assigned])
            if split is None:
                self._main_used = True
                self.main_generator.on_events(values, event_times, self.output)
            else:
                out = self._split_output(split)
                out.generator.on_events(values, event_times, out.immediate)
        return WatermarkBatch(assigned, self.output.drain())

    def _assign(self, values: Sequence[Any], timestamps: Sequence[int | None] | None) -> list[int | None]:
        """The records' new timestamps (a new list), each checked to be an int of 64 bits."""
        assigner = self.assigner
        if assigner is None:
            return list(timestamps) if timestamps is not None else [None] * len(values)
        current: Any
        if self._timestamp_field is not None:  # ``return value[c]``: a C-level loop with no Python call
            out = list(map(self._timestamp_field, values))
        else:
            if timestamps is None:
                current = itertools.repeat(LONG_MIN)
            elif None in timestamps:
                current = [LONG_MIN if t is None else t for t in timestamps]
            else:
                current = timestamps
            out = list(map(assigner.extract_timestamp, values, current))  # one C-level loop calling the user's method
        if not _INT_ONLY.issuperset(map(type, out)):  # (the usual case is checked without a Python loop)
            for value, ts in zip(values, out):
                if type(ts) is int:
                    continue
                try:
                    operator.index(ts)
                except TypeError:
                    raise TypeError(
                        f"{type(assigner).__name__}.extract_timestamp returned {ts!r} ({type(ts).__name__}) for "
                        f"record {value!r}: a timestamp is integer milliseconds"
                    ) from None
                out = [operator.index(t) for t in out]
                break
        if not ints_in_range(out, len(out), 64):  # one C pass (struct), where min and max took two
            raise ValueError(f"{type(assigner).__name__}.extract_timestamp returned a timestamp outside 64 bits")
        return out

    # -- splits --------------------------------------------------------------------------------

    def _split_output(self, split: Hashable) -> _SplitOutput:
        out = self._splits.get(split)
        if out is None:
            self._multiplexer.register_new_output(split)
            out = _SplitOutput(
                self._new_generator(),
                self._multiplexer.get_immediate_output(split),
                self._multiplexer.get_deferred_output(split),
            )
            self._splits[split] = out
        return out

    def add_split(self, split: Hashable) -> None:
        """``split`` is assigned: until its first records it holds the combined watermark back (at
        ``LONG_MIN``), as a Flink source's split output does from its assignment on."""
        self._split_output(split)

    def release_split(self, split: Hashable) -> list[WatermarkEvent]:
        """``split`` is finished or moved away: it no longer holds the combined watermark back."""
        if self._splits.pop(split, None) is not None:
            self._multiplexer.unregister_output(split)
            self._multiplexer.on_periodic_emit()
        return self.output.drain()

    # -- time ----------------------------------------------------------------------------------

    def emit_periodic(self) -> list[WatermarkEvent]:
        """One periodic round: every generator's ``on_periodic_emit``, splits combined."""
        self._periodic_round()
        return self.output.drain()

    def _periodic_round(self) -> None:
        self._last_periodic = self.clock()
        if self.progressive and not self.finished:
            # The main generator speaks for the subtask unless records come from splits only (then
            # it has seen nothing and would hold the watermark at LONG_MIN or idle the output).
            if self._main_used or not self._splits:
                self.main_generator.on_periodic_emit(self.output)
            for out in self._splits.values():
                out.generator.on_periodic_emit(out.deferred)
            self._multiplexer.on_periodic_emit()

    def next_periodic_ms(self) -> int | None:
        """When the next periodic round is due (``clock`` time), or None when there are none."""
        if self.interval_ms <= 0 or self.finished:
            return None
        return int(self._last_periodic + self.interval_ms)

    def emit_periodic_if_due(self) -> list[WatermarkEvent]:
        """:meth:`emit_periodic` when the interval has passed since the last round, else nothing."""
        if self.interval_ms > 0 and self.clock() - self._last_periodic >= self.interval_ms:
            return self.emit_periodic()
        return []

    def on_upstream_watermark(self, watermark: int) -> list[WatermarkEvent]:
        """A watermark from upstream (``assign_timestamps_and_watermarks`` mid-stream): this strategy
        replaces upstream watermarks, except the final one, which is forwarded."""
        if _check_watermark(watermark) == LONG_MAX:
            self.output.emit_watermark(LONG_MAX)
        return self.output.drain()

    def end_of_input(self) -> list[WatermarkEvent]:
        """The input is exhausted: a last periodic round, then the final ``LONG_MAX`` watermark
        (emitted whatever the strategy, so every event-time window and timer downstream fires)."""
        self._periodic_round()
        self.finished = True
        self.output.emit_watermark(LONG_MAX)
        return self.output.drain()

    def _new_generator(self) -> WatermarkGenerator:
        if not self.progressive:
            return NoWatermarksGenerator()
        return self.strategy.create_watermark_generator(self.clock)
