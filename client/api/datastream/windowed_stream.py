"""``WindowedStream`` and ``AllWindowedStream``: PyFlink's windowing API over the window operator.

``key_by(...).window(assigner)`` (or ``.count_window(size[, slide])``) gives a WindowedStream;
``window_all(assigner)`` on any stream gives an AllWindowedStream, which Flink runs as a keyed
window over one constant key with parallelism 1. Each is configured with ``trigger``, ``evictor``,
``allowed_lateness`` and ``side_output_late_data``, then ends in ``reduce``, ``aggregate``,
``apply`` or ``process``, which add one window operator (``runtime/operators/window.py``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from millstream.common.typeinfo import TypeInformation
from millstream.datastream import functions as fn
from millstream.datastream.evictors import Evictor
from millstream.datastream.triggers import _millis
from millstream.datastream.window import MergingWindowAssigner, Trigger, WindowAssigner
from millstream.runtime import operator_factories
from millstream.runtime.output_tag import OutputTag

if TYPE_CHECKING:
    from millstream.datastream.data_stream import DataStream, KeyedStream

__all__ = ["AllWindowedStream", "WindowedStream"]


class NullByteKeySelector(fn.KeySelector):
    """The one key of every record of a ``window_all`` (Flink's NullByteKeySelector)."""

    def get_key(self, value: Any) -> int:
        return 0


def _lateness_ms(time: Any) -> int:
    if isinstance(time, bool):
        raise TypeError(f"allowed_lateness needs milliseconds or a Duration, got {time!r}")
    millis = time if isinstance(time, int) else _millis(time, "allowed_lateness")
    if millis < 0:
        raise ValueError(f"The allowed lateness cannot be negative, got {millis} ms")
    return millis


class _Windowed:
    """What WindowedStream and AllWindowedStream share: the settings and building the operator."""

    _what = "WindowedStream"
    _window_function_types: tuple[type, type] = (fn.WindowFunction, fn.ProcessWindowFunction)
    _single: tuple[type, type] = (fn.InternalSingleValueWindowFunction, fn.InternalSingleValueProcessWindowFunction)
    _pass_through: type = fn.PassThroughWindowFunction

    def __init__(self, keyed_stream: "KeyedStream", window_assigner: WindowAssigner) -> None:
        if not isinstance(window_assigner, WindowAssigner):
            raise TypeError(f"window() needs a WindowAssigner, got {type(window_assigner).__name__}")
        self._keyed_stream = keyed_stream
        self._window_assigner = window_assigner
        self._window_trigger: Trigger | None = None
        self._evictor: Evictor | None = None
        self._allowed_lateness = 0
        self._late_data_output_tag: OutputTag | None = None

    def get_execution_environment(self) -> Any:
        return self._keyed_stream.get_execution_environment()

    def get_input_type(self) -> TypeInformation | None:
        return self._keyed_stream.get_type()

    def trigger(self, trigger: Trigger) -> Any:
        """The Trigger that decides when a window is evaluated (instead of the assigner's default)."""
        if not isinstance(trigger, Trigger):
            raise TypeError(f"trigger() needs a Trigger, got {type(trigger).__name__}")
        if isinstance(self._window_assigner, MergingWindowAssigner) and trigger.can_merge() is not True:
            raise TypeError("A merging window assigner cannot be used with a trigger that does not support merging.")
        self._window_trigger = trigger
        return self

    def evictor(self, evictor: Evictor) -> Any:
        """An Evictor that removes elements of a pane before and/or after the window function. Panes
        then keep every element, so reduce and aggregate run when the window fires."""
        if not isinstance(evictor, Evictor):
            raise TypeError(f"evictor() needs an Evictor, got {type(evictor).__name__}")
        self._evictor = evictor
        return self

    def allowed_lateness(self, time_ms: Any) -> Any:
        """How long after its end a window keeps its state (milliseconds, or a Duration/Time):
        elements that arrive in that time fire the window again; later ones are late. Event time only."""
        self._allowed_lateness = _lateness_ms(time_ms)
        return self

    def side_output_late_data(self, output_tag: OutputTag) -> Any:
        """Late elements (behind the watermark by more than the allowed lateness, in no window) go to
        this side output instead of being dropped: ``result.get_side_output(output_tag)``."""
        if not isinstance(output_tag, OutputTag):
            raise TypeError(f"side_output_late_data() needs an OutputTag, got {type(output_tag).__name__}")
        self._late_data_output_tag = output_tag
        return self

    # -- the window function -------------------------------------------------------------------

    def _single_value(self, window_function: Any) -> fn.InternalWindowFunction:
        plain, process = self._window_function_types
        if window_function is None:
            return self._single[0](self._pass_through())
        if isinstance(window_function, plain):
            return self._single[0](window_function)
        if isinstance(window_function, process):
            return self._single[1](window_function)
        raise TypeError(f"window_function should be a {plain.__name__} or {process.__name__}, "
                        f"got {type(window_function).__name__}")

    def reduce(self, reduce_function: Any, window_function: Any = None,
               output_type: TypeInformation | None = None) -> "DataStream":
        """Reduces each pane incrementally to one value; the window function (if any) gets it when
        the window fires."""
        reducer = fn.as_reduce_function(reduce_function)
        if window_function is None and output_type is None:
            output_type = self.get_input_type()
        return self._build("reduce", self._single_value(window_function), output_type,
                           _describe(reduce_function, window_function), reduce_function=reducer)

    def aggregate(self, aggregate_function: fn.AggregateFunction, window_function: Any = None,
                  accumulator_type: TypeInformation | None = None,
                  output_type: TypeInformation | None = None) -> "DataStream":
        """Aggregates each pane incrementally in one accumulator; ``get_result`` (through the window
        function, if any) when the window fires. Session windows merge accumulators with ``merge``."""
        if not isinstance(aggregate_function, fn.AggregateFunction):
            raise TypeError(f"aggregate() needs an AggregateFunction, got {type(aggregate_function).__name__}")
        return self._build("aggregate", self._single_value(window_function), output_type,
                           _describe(aggregate_function, window_function), aggregate_function=aggregate_function)

    def _iterable(self, window_function: Any, expected: type, internal: type, method: str) -> fn.InternalWindowFunction:
        if not isinstance(window_function, expected):
            raise TypeError(f"{method}() needs a {expected.__name__}, got {type(window_function).__name__}")
        return internal(window_function)

    def _build(self, contents: str, internal: fn.InternalWindowFunction, output_type: TypeInformation | None,
               description: str, reduce_function: Any = None, aggregate_function: Any = None) -> "DataStream":
        assigner = self._window_assigner
        trigger = self._window_trigger or assigner.get_default_trigger(self.get_execution_environment())
        factory = operator_factories.WindowFactory(
            assigner=assigner,
            trigger=trigger,
            window_function=internal,
            contents=contents,
            reduce_function=reduce_function,
            aggregate_function=aggregate_function,
            evictor=self._evictor,
            allowed_lateness=self._allowed_lateness,
            late_data_tag=self._late_data_output_tag.tag_id if self._late_data_output_tag else None,
        )
        prefix = "Evicting" if self._evictor is not None else ""
        name = f"{prefix}{self._operator_name}({assigner!r}, {trigger!r}, {description})"
        stream = self._keyed_stream._one_input(name, factory, output_type, self._keyed_stream)
        if self._late_data_output_tag is not None:  # the tag's type is known before get_side_output
            tag = self._late_data_output_tag
            stream._transformation.side_output_types.setdefault(tag.tag_id, tag.type_info)
        return self._finish(stream)

    _operator_name = "Window"

    def _finish(self, stream: "DataStream") -> "DataStream":
        return stream


def _describe(function: Any, window_function: Any) -> str:
    name = type(function).__name__
    if name == "function":
        name = "ReduceFunction"
    return name if window_function is None else f"{name}, {type(window_function).__name__}"


class WindowedStream(_Windowed):
    """A keyed stream split into windows by a WindowAssigner; each key's windows are evaluated on
    their own when the Trigger fires."""

    def apply(self, window_function: fn.WindowFunction, output_type: TypeInformation | None = None) -> "DataStream":
        """``window_function.apply(key, window, elements)`` for each firing (the pane is kept whole)."""
        internal = self._iterable(window_function, fn.WindowFunction, fn.InternalIterableWindowFunction, "apply")
        return self._build("list", internal, output_type, type(window_function).__name__)

    def process(self, process_window_function: fn.ProcessWindowFunction,
                output_type: TypeInformation | None = None) -> "DataStream":
        """``process(key, context, elements)`` for each firing, with the window, time, per-window and
        global state and side outputs in the context."""
        internal = self._iterable(process_window_function, fn.ProcessWindowFunction,
                                  fn.InternalIterableProcessWindowFunction, "process")
        return self._build("list", internal, output_type, type(process_window_function).__name__)


class AllWindowedStream(_Windowed):
    """A whole stream split into windows (``window_all``): one operator instance sees every record."""

    _what = "AllWindowedStream"
    _window_function_types = (fn.AllWindowFunction, fn.ProcessAllWindowFunction)
    _single = (fn.InternalSingleValueAllWindowFunction, fn.InternalSingleValueProcessAllWindowFunction)
    _pass_through = fn.PassThroughAllWindowFunction
    _operator_name = "AllWindow"

    def __init__(self, data_stream: "DataStream", window_assigner: WindowAssigner) -> None:
        super().__init__(data_stream.key_by(NullByteKeySelector()), window_assigner)

    def apply(self, window_function: fn.AllWindowFunction, output_type: TypeInformation | None = None) -> "DataStream":
        """``window_function.apply(window, elements)`` for each firing."""
        internal = self._iterable(window_function, fn.AllWindowFunction, fn.InternalIterableAllWindowFunction, "apply")
        return self._build("list", internal, output_type, type(window_function).__name__)

    def process(self, process_window_function: fn.ProcessAllWindowFunction,
                output_type: TypeInformation | None = None) -> "DataStream":
        """``process(context, elements)`` for each firing."""
        internal = self._iterable(process_window_function, fn.ProcessAllWindowFunction,
                                  fn.InternalIterableProcessAllWindowFunction, "process")
        return self._build("list", internal, output_type, type(process_window_function).__name__)

    def _finish(self, stream: "DataStream") -> "DataStream":
        t = stream._transformation
        t.parallelism = 1  # Flink: a non-keyed window runs in one instance (forceNonParallel)
        t.non_parallel = True
        return stream
