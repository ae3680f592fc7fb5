"""``DataStream``, ``KeyedStream`` and ``DataStreamSink``: PyFlink's stream API over transformations."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

from millstream.common.row import Row
from millstream.common.typeinfo import TypeInformation, Types
from millstream.common.watermark_strategy import WatermarkStrategy
from millstream.runtime.output_tag import OutputTag
from millstream.datastream import functions as fn
from millstream.datastream.state import MapStateDescriptor
from millstream.datastream.transformations import (
    ChainingStrategy,
    OneInputTransformation,
    PartitionTransformation,
    SideOutputTransformation,
    SinkTransformation,
    Transformation,
    TwoInputTransformation,
    UnionTransformation,
)
from millstream.datastream.window import CountSlidingWindowAssigner, CountTumblingWindowAssigner
from millstream.runtime import operator_factories
from millstream.runtime import partitioners as parts
from millstream.runtime.keygroups import UPPER_BOUND_MAX_PARALLELISM
from millstream.runtime.narrowing import NarrowedKey, value_narrower

if TYPE_CHECKING:
    from millstream.datastream.state import MapStateDescriptor
    from millstream.datastream.stream_execution_environment import StreamExecutionEnvironment


# Like Flink's arrays, Python's lists and dicts cannot be keys: they are neither hashable nor stable.
_UNKEYABLE_TYPES = frozenset({"LIST", "MAP", "BASIC_ARRAY", "PRIMITIVE_ARRAY", "OBJECT_ARRAY"})


def _check_parallelism(parallelism: int, what: str) -> int:
    if not isinstance(parallelism, int) or isinstance(parallelism, bool) or parallelism < 1:
        raise ValueError(f"The parallelism of {what} must be at least 1, got {parallelism!r}.")
    return parallelism


def _check_max_parallelism(max_parallelism: int, what: str) -> int:
    if not isinstance(max_parallelism, int) or not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise ValueError(
            f"The maximum parallelism of {what} must be between 1 and "
            f"{UPPER_BOUND_MAX_PARALLELISM} (inclusive), got {max_parallelism!r}."
        )
    return max_parallelism


class _Configurable:
    """Settings shared by operators and sinks (Flink's SingleOutputStreamOperator/DataStreamSink)."""

    _transformation: Transformation

    def _operator(self, setting: str) -> Transformation:
        t = self._transformation
        if t.is_virtual:
            raise TypeError(
                f"{setting} applies to an operator, but this stream is a {t.name.lower()} of "
                f"'{t.inputs[0].name}'; call it on an operator (map, process, a source or a sink)."
            )
        return t

    def name(self, name: str) -> Any:
        self._operator("name()").name = name
        return self

    def get_name(self) -> str:
        return self._transformation.name

    def uid(self, uid: str) -> Any:
        if not uid:
            raise ValueError("uid must be a non-empty string")
        self._operator("uid()").uid = uid
        return self

    def set_uid_hash(self, uid_hash: str) -> Any:
        t = self._operator("set_uid_hash()")
        if len(uid_hash) != 32 or any(c not in "0123456789abcdefABCDEF" for c in uid_hash):
            raise ValueError(f"The uid hash of '{t.name}' must be 32 hex characters, got {uid_hash!r}")
        t.uid_hash = uid_hash.lower()
        return self

    def set_parallelism(self, parallelism: int) -> Any:
        t = self._operator("set_parallelism()")
        _check_parallelism(parallelism, f"operator '{t.name}'")
        factory = getattr(t, "factory", None)
        if isinstance(factory, operator_factories.SourceFactory) and not factory.parallel and parallelism != 1:
            raise ValueError(f"The parallelism of non parallel operator '{t.name}' must be 1.")
        if getattr(t, "non_parallel", False) and parallelism != 1:  # window_all
            raise ValueError(f"The parallelism of non parallel operator '{t.name}' must be 1.")
        t.parallelism = parallelism
        return self

    def set_max_parallelism(self, max_parallelism: int) -> Any:
        t = self._operator("set_max_parallelism()")
        if getattr(t, "non_parallel", False) and max_parallelism != 1:
            raise ValueError(f"The max parallelism of non parallel operator '{t.name}' must be 1.")
        t.max_parallelism = _check_max_parallelism(max_parallelism, f"operator '{t.name}'")
        return self

    def slot_sharing_group(self, slot_sharing_group: Any) -> Any:
        name = getattr(slot_sharing_group, "get_name", lambda: slot_sharing_group)()
        if not isinstance(name, str) or not name:
            raise ValueError("slot_sharing_group needs a non-empty name")
        t = self._operator("slot_sharing_group()")
        t.slot_sharing_group = name
        if not isinstance(slot_sharing_group, str):  # a SlotSharingGroup: the environment reads its spec
            t.slot_sharing_group_spec = slot_sharing_group  # type: ignore[attr-defined]
        return self

    def disable_chaining(self) -> Any:
        self._operator("disable_chaining()").chaining_strategy = ChainingStrategy.NEVER
        return self

    def start_new_chain(self) -> Any:
        self._operator("start_new_chain()").chaining_strategy = ChainingStrategy.HEAD
        return self

    def set_buffer_timeout(self, timeout_millis: int) -> Any:
        if timeout_millis < -1:
            raise ValueError("buffer timeout must be >= -1")
        self._operator("set_buffer_timeout()").buffer_timeout = timeout_millis
        return self


class DataStream(_Configurable):
    """A stream of records; every operation returns a new stream backed by a transformation."""

    def __init__(self, transformation: Transformation, env: "StreamExecutionEnvironment") -> None:
        self._transformation = transformation
        self._env = env

    def get_type(self) -> TypeInformation | None:
        return self._transformation.output_type

    def force_non_parallel(self) -> "DataStream":
        """Parallelism and max parallelism 1, and no other parallelism may be set later
        (Flink's ``forceNonParallel``)."""
        t = self._operator("force_non_parallel()")
        t.parallelism = 1
        t.max_parallelism = 1
        t.non_parallel = True
        return self

    def get_execution_environment(self) -> "StreamExecutionEnvironment":
        return self._env

    def get_transformation(self) -> Transformation:
        return self._transformation

    # -- one-input operators -----------------------------------------------------------------

    def _one_input(
        self, name: str, factory: operator_factories.OperatorFactory, output_type: Any = None, keyed: "KeyedStream | None" = None
    ) -> "DataStream":
        if output_type is not None and not isinstance(factory, (operator_factories.FilterFactory, operator_factories.TimestampsAndWatermarksFactory)):
            factory.output_type = output_type  # narrowed at run time as PyFlink's typed output
        t = OneInputTransformation(
            self._env,
            name,
            self._transformation,
            factory,
            self._env.get_parallelism(),
            output_type,
            state_key_selector=keyed._key_selector if keyed else None,
            state_key_type=keyed._key_type if keyed else None,
        )
        self._env._add_operator(t)
        return DataStream(t, self._env)

    def map(self, func: Any, output_type: TypeInformation | None = None) -> "DataStream":
        return self._one_input("Map", operator_factories.MapFactory(fn.as_map_function(func)), output_type, self._keyed())

    def flat_map(self, func: Any, output_type: TypeInformation | None = None) -> "DataStream":
        return self._one_input("FlatMap", operator_factories.FlatMapFactory(fn.as_flat_map_function(func)), output_type, self._keyed())

    def filter(self, func: Any) -> "DataStream":
        return self._one_input("Filter", operator_factories.FilterFactory(fn.as_filter_function(func)), self.get_type(), self._keyed())

    def process(self, func: fn.ProcessFunction, output_type: TypeInformation | None = None) -> "DataStream":
        if isinstance(func, fn.KeyedProcessFunction):
            raise TypeError("A KeyedProcessFunction needs a keyed stream: call key_by(...) before process(...)")
        if not isinstance(func, fn.ProcessFunction):
            raise TypeError(f"process() needs a ProcessFunction, got {type(func).__name__}")
        return self._one_input("Process", operator_factories.ProcessFactory(func), output_type)

    def assign_timestamps_and_watermarks(self, watermark_strategy: WatermarkStrategy) -> "DataStream":
        """Gives every record the strategy's timestamp and makes its watermarks, which replace any
        from upstream (Flink's TimestampsAndWatermarksOperator)."""
        if not isinstance(watermark_strategy, WatermarkStrategy):
            raise TypeError(
                f"assign_timestamps_and_watermarks needs a WatermarkStrategy, got {type(watermark_strategy).__name__}")
        return self._one_input("Timestamps/Watermarks", operator_factories.TimestampsAndWatermarksFactory(watermark_strategy), self.get_type())

    def _keyed(self) -> "KeyedStream | None":
        return None

    def window_all(self, window_assigner: Any) -> "AllWindowedStream":
        """Windows over the whole stream (not per key): one operator instance (parallelism 1)
        evaluates every window, as in Flink."""
        return AllWindowedStream(self, window_assigner)

    # -- partitioning (virtual) ----------------------------------------------------------------

    def _partition(self, partitioner: parts.StreamPartitioner) -> "DataStream":
        return DataStream(PartitionTransformation(self._env, self._transformation, partitioner), self._env)

    def key_by(self, key_selector: Any, key_type: TypeInformation | None = None) -> "KeyedStream":
        if not (isinstance(key_selector, fn.KeySelector) or callable(key_selector)):
            raise TypeError(
                f"key_by on '{self._transformation.name}' needs a KeySelector or a callable, "
                f"got {type(key_selector).__name__}"
            )
        if key_type is not None and key_type.name in _UNKEYABLE_TYPES:
            raise ValueError(
                f"key_by on '{self._transformation.name}': type {key_type} cannot be used as a key "
                "(keys must be hashable and compare by value: use a tuple or a string instead)."
            )
        selector = fn.as_key_selector(key_selector)
        narrow = value_narrower(key_type)
        if narrow is not None:  # PyFlink writes keys with key_type: a SHORT key wraps as a Java short
            selector = fn.as_key_selector(NarrowedKey(parts.key_function(selector), narrow))
        return KeyedStream(self, selector, key_type)

    def forward(self) -> "DataStream":
        return self._partition(parts.ForwardPartitioner())

    def rebalance(self) -> "DataStream":
        return self._partition(parts.RebalancePartitioner())

    def rescale(self) -> "DataStream":
        return self._partition(parts.RescalePartitioner())

    def shuffle(self) -> "DataStream":
        return self._partition(parts.ShufflePartitioner())

    def broadcast(
        self, broadcast_state_descriptor: "MapStateDescriptor | None" = None, *other_broadcast_state_descriptors: "MapStateDescriptor"
    ) -> "Any":
        """Every record to every parallel instance downstream. With MapStateDescriptors, a
        :class:`BroadcastStream` whose records update that broadcast state (``connect`` it to a stream
        and ``process`` with a (Keyed)BroadcastProcessFunction); without, a plain DataStream."""
        partitioned = self._partition(parts.BroadcastPartitioner())
        if broadcast_state_descriptor is None:
            if other_broadcast_state_descriptors:
                raise TypeError("broadcast(): the first broadcast state descriptor is None")
            return partitioned
        return BroadcastStream(partitioned, [broadcast_state_descriptor, *other_broadcast_state_descriptors])

    def connect(self, ds: "DataStream | BroadcastStream") -> "ConnectedStreams | BroadcastConnectedStream":
        """Two streams, possibly of different types, into one operator that sees which input a record
        came from: ConnectedStreams, or with a BroadcastStream a BroadcastConnectedStream."""
        if isinstance(ds, BroadcastStream):
            _same_env(self, ds._input, "connect()")
            return BroadcastConnectedStream(self, ds, ds.broadcast_state_descriptors)
        if not isinstance(ds, DataStream):
            raise TypeError(f"connect() needs a DataStream or a BroadcastStream, got {type(ds).__name__}")
        _same_env(self, ds, "connect()")
        return ConnectedStreams(self, ds)

    def global_(self) -> "DataStream":
        return self._partition(parts.GlobalPartitioner())

    def partition_custom(self, partitioner: Any, key_selector: Any) -> "DataStream":
        wrapper = parts.CustomPartitionerWrapper(fn.as_partitioner(partitioner), fn.as_key_selector(key_selector))
        return self._partition(wrapper)

    def project(self, *field_indexes: int) -> "DataStream":
        """Keeps the given fields of each tuple (or row), in the given order (PyFlink's ``project``:
        the stream needs a TUPLE or ROW type, and the result is typed by the kept fields)."""
        t = self.get_type()
        if t is None or t.name not in ("TUPLE", "ROW"):
            raise Exception("Only Tuple DataStreams can be projected.")
        if not field_indexes:
            raise ValueError("project() needs at least one field index")
        width = len(t.components)
        for index in field_indexes:
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < width:
                raise IndexError(f"project(): field index {index!r} is out of range for {t} ({width} fields)")
        indexes = tuple(field_indexes)
        kept = [t.components[i] for i in indexes]
        if t.name == "ROW":
            output = Types.ROW_NAMED([t.field_names[i] for i in indexes], kept)
            names = output.field_names

            def project_row(value: Any) -> Any:
                return Row.of_names(names, [value[i] for i in indexes])

            return self.map(project_row, output_type=output).name("Projection")
        return self.map(lambda value: tuple(value[i] for i in indexes),
                        output_type=Types.TUPLE(kept)).name("Projection")

    def union(self, *streams: "DataStream") -> "DataStream":
        # As PyFlink's: a keyed stream joins a union through its values operator (KeyedStream._values).
        streams = tuple(s._values() if isinstance(s, KeyedStream) else s for s in streams)
        inputs = [self._transformation] + [s._transformation for s in streams]
        for s in streams:
            if s._env is not self._env:
                raise ValueError("union() needs streams of the same StreamExecutionEnvironment")
        return DataStream(UnionTransformation(self._env, inputs), self._env)

    def get_side_output(self, output_tag: OutputTag) -> "DataStream":
        t = self._operator("get_side_output()")
        known = t.side_output_types.get(output_tag.tag_id, output_tag.type_info)
        if output_tag.tag_id in t.side_output_types and known != output_tag.type_info:
            raise ValueError(
                f"Operator '{t.name}' already has a side output '{output_tag.tag_id}' of type {known}; "
                f"it cannot be requested again with type {output_tag.type_info}. Side output ids must be unique."
            )
        t.side_output_types[output_tag.tag_id] = output_tag.type_info
        return DataStream(SideOutputTransformation(self._env, t, output_tag.tag_id, output_tag.type_info), self._env)

    # -- sinks -------------------------------------------------------------------------------

    def _sink(self, name: str, factory: operator_factories.SinkFactory) -> "DataStreamSink":
        t = SinkTransformation(self._env, name, self._transformation, factory, self._env.get_parallelism())
        self._env._add_operator(t)
        return DataStreamSink(t)

    def print(self, sink_identifier: str | None = None) -> "DataStreamSink":
        return self._sink("Print to Std. Out", operator_factories.PrintSinkFactory(sink_identifier, type_info=self.get_type()))

    def add_sink(self, sink_func: Any) -> "DataStreamSink":
        if callable(getattr(sink_func, "_sink_factory", None)):  # StreamingFileSink: a Sink behind SinkFunction
            return self.sink_to(sink_func)
        return self._sink("Unnamed", operator_factories.SinkFunctionFactory(fn.as_sink_function(sink_func)))

    def sink_to(self, sink: Any) -> "DataStreamSink":
        factory = getattr(sink, "_sink_factory", None)
        if not callable(factory):
            raise TypeError(f"sink_to() needs a Sink such as FileSink, got {type(sink).__name__}")
        sink_factory = factory()
        if hasattr(sink_factory, "type_info"):  # sinks that write records as text follow the declared type
            sink_factory.type_info = self.get_type()
        return self._sink(getattr(sink, "name", type(sink).__name__), sink_factory)

    def execute_and_collect(self, job_execution_name: str | None = None, limit: int | None = None) -> Any:
        """Run the job and iterate over this stream's records (PyFlink's form; usable in ``with``)."""
        return self._env._execute_and_collect(self, job_execution_name, limit)


# PyFlink's name of the operator that turns a keyed stream back into a plain one (PythonConfigUtil's).
KEYED_STREAM_VALUES_NAME = "_keyed_stream_values_operator"


class KeyedStream(DataStream):
    """A stream partitioned by key; its operators may use keyed state."""

    def __init__(self, input: DataStream, key_selector: fn.KeySelector, key_type: TypeInformation | None) -> None:
        partition = PartitionTransformation(
            input._env, input._transformation, parts.KeyGroupStreamPartitioner(key_selector)
        )
        super().__init__(partition, input._env)
        self._origin_stream = input
        self._key_selector = key_selector
        self._key_type = key_type

    def _keyed(self) -> "KeyedStream":
        return self

    def _values(self) -> DataStream:
        """The keyed stream's records as a plain stream, through an identity operator named as
        PyFlink's (``_keyed_stream_values_operator``): PyFlink's union of a keyed stream goes through
        it, so its plan and exchanges (HASH into it, then on to the union's consumer) are PyFlink's."""
        return self.map(lambda value: value, output_type=self.get_type()).name(KEYED_STREAM_VALUES_NAME)

    def union(self, *streams: DataStream) -> DataStream:
        return self._values().union(*streams)

    # PyFlink's KeyedStream forbids every partitioning call, as Flink's (its setConnectionType).
    def _no_partitioning(self, *args: Any, **kwargs: Any) -> "DataStream":
        raise Exception("Cannot override partitioning for KeyedStream.")

    shuffle = rebalance = rescale = forward = broadcast = global_ = partition_custom = _no_partitioning

    def execute_and_collect(self, job_execution_name: str | None = None, limit: int | None = None) -> Any:
        """A keyed stream's records are ``Row(f0=key, f1=value)`` in PyFlink (its key_by pairs each
        record with its key), and that is what collecting one returns there."""
        names = ("f0", "f1")

        class WithKey(fn.KeyedProcessFunction):
            def process_element(self, value: Any, ctx: Any) -> Any:
                yield Row.of_names(names, [ctx.get_current_key(), value])

        pickled = Types.PICKLED_BYTE_ARRAY()
        row_type = Types.ROW([self._key_type or pickled, self.get_type() or pickled])
        with_key = self.process(WithKey(), output_type=row_type).name("Key and Value")
        return with_key.execute_and_collect(job_execution_name, limit)

    def process(self, func: Any, output_type: TypeInformation | None = None) -> DataStream:
        if not isinstance(func, fn.KeyedProcessFunction):
            if isinstance(func, fn.ProcessFunction):
                raise TypeError("A keyed stream needs a KeyedProcessFunction, got a ProcessFunction")
            raise TypeError(f"process() on a keyed stream needs a KeyedProcessFunction, got {type(func).__name__}")
        return self._one_input("KeyedProcess", operator_factories.KeyedProcessFactory(func), output_type, self)

    def window(self, window_assigner: Any) -> "WindowedStream":
        """Splits each key's records into windows (tumbling, sliding, sessions, global...); end the
        WindowedStream with reduce, aggregate, apply or process."""
        return WindowedStream(self, window_assigner)

    def count_window(self, size: int, slide: int = 0) -> "WindowedStream":
        """Tumbling count windows of ``size`` elements per key, or sliding ones every ``slide``."""
        if slide == 0:
            return WindowedStream(self, CountTumblingWindowAssigner(size))
        return WindowedStream(self, CountSlidingWindowAssigner(size, slide))

    def reduce(self, func: Any) -> DataStream:
        return self._one_input("Keyed Reduce", operator_factories.ReduceFactory(fn.as_reduce_function(func)), self.get_type(), self)

    def _aggregate(self, aggregation: str, field: int | str) -> DataStream:
        if not isinstance(field, (int, str)):
            raise TypeError(f"{aggregation}() needs a field position or name, got {field!r}")
        factory = operator_factories.AggregationFactory(aggregation=aggregation, field=field)
        return self._one_input("Keyed Aggregation", factory, self.get_type(), self)

    def sum(self, position_to_sum: int | str = 0) -> DataStream:
        return self._aggregate("sum", position_to_sum)

    def min(self, position_to_min: int | str = 0) -> DataStream:
        return self._aggregate("min", position_to_min)

    def max(self, position_to_max: int | str = 0) -> DataStream:
        return self._aggregate("max", position_to_max)

    def min_by(self, position_to_min_by: int | str = 0) -> DataStream:
        return self._aggregate("min_by", position_to_min_by)

    def max_by(self, position_to_max_by: int | str = 0) -> DataStream:
        return self._aggregate("max_by", position_to_max_by)


def _same_env(a: DataStream, b: DataStream, what: str) -> None:
    if a._env is not b._env:
        raise ValueError(f"{what} needs streams of the same StreamExecutionEnvironment")


def _two_input(
    name: str,
    first: DataStream,
    second: DataStream,
    factory: operator_factories.OperatorFactory,
    output_type: TypeInformation | None,
    key_selector1: fn.KeySelector | None = None,
    key_selector2: fn.KeySelector | None = None,
    key_type: TypeInformation | None = None,
) -> DataStream:
    env = first._env
    if output_type is not None:
        factory.output_type = output_type  # narrowed at run time as PyFlink's typed output
    t = TwoInputTransformation(
        env, name, first._transformation, second._transformation, factory, env.get_parallelism(), output_type,
        key_selector1, key_selector2, key_type,
    )
    env._add_operator(t)
    return DataStream(t, env)


class ConnectedStreams:
    """Two streams connected into one two-input operator (PyFlink's ConnectedStreams): ``map``,
    ``flat_map`` and ``process`` call the function's ``*1`` method for the first stream's records and
    ``*2`` for the second's. When both streams are keyed (``key_by(key_selector1, key_selector2)``)
    the operator has keyed state and timers, and each record is keyed by its own stream's selector;
    records of both streams with equal keys meet in the same parallel instance."""

    def __init__(self, stream1: DataStream, stream2: DataStream) -> None:
        self.stream1 = stream1
        self.stream2 = stream2

    def key_by(self, key_selector1: Any, key_selector2: Any, key_type: TypeInformation | None = None) -> "ConnectedStreams":
        ds1 = self.stream1._origin_stream if isinstance(self.stream1, KeyedStream) else self.stream1
        ds2 = self.stream2._origin_stream if isinstance(self.stream2, KeyedStream) else self.stream2
        return ConnectedStreams(ds1.key_by(key_selector1, key_type), ds2.key_by(key_selector2, key_type))

    def _is_keyed_stream(self) -> bool:
        return isinstance(self.stream1, KeyedStream) and isinstance(self.stream2, KeyedStream)

    def _apply(self, name: str, factory: operator_factories.OperatorFactory, output_type: TypeInformation | None) -> DataStream:
        s1, s2 = self.stream1, self.stream2
        if isinstance(s1, KeyedStream) and isinstance(s2, KeyedStream):
            t1, t2 = s1._key_type, s2._key_type
            if t1 is not None and t2 is not None and t1 != t2:
                raise TypeError(f"{name}: the key types of the two keyed streams differ: {t1} and {t2}")
            return _two_input(name, s1, s2, factory, output_type, s1._key_selector, s2._key_selector, t1 or t2)
        return _two_input(name, s1, s2, factory, output_type)

    def map(self, func: fn.CoMapFunction, output_type: TypeInformation | None = None) -> DataStream:
        if not isinstance(func, fn.CoMapFunction):
            raise TypeError(f"ConnectedStreams.map() needs a CoMapFunction (map1, map2), got {type(func).__name__}")
        return self._apply("Co-Map", operator_factories.CoMapFactory(func), output_type)

    def flat_map(self, func: fn.CoFlatMapFunction, output_type: TypeInformation | None = None) -> DataStream:
        if not isinstance(func, fn.CoFlatMapFunction):
            raise TypeError(
                f"ConnectedStreams.flat_map() needs a CoFlatMapFunction (flat_map1, flat_map2), got {type(func).__name__}"
            )
        return self._apply("Co-Flat Map", operator_factories.CoFlatMapFactory(func), output_type)

    def process(self, func: Any, output_type: TypeInformation | None = None) -> DataStream:
        if not isinstance(func, (fn.CoProcessFunction, fn.KeyedCoProcessFunction)):
            raise TypeError(
                f"ConnectedStreams.process() needs a CoProcessFunction or a KeyedCoProcessFunction, got {type(func).__name__}"
            )
        if self._is_keyed_stream():
            return self._apply("Keyed Co-Process", operator_factories.CoProcessFactory(func), output_type)
        if isinstance(func, fn.KeyedCoProcessFunction):
            raise TypeError(
                "A KeyedCoProcessFunction needs keyed connected streams: key both streams "
                "(connected.key_by(key_selector1, key_selector2)) before process(...)"
            )
        return self._apply("Co-Process", operator_factories.CoProcessFactory(func), output_type)


class BroadcastStream:
    """A stream whose every record goes to every parallel instance of the operator it is connected
    to, where it may update the broadcast state declared by ``broadcast_state_descriptors``."""

    def __init__(self, input_stream: DataStream, broadcast_state_descriptors: list[Any]) -> None:
        names = set()
        for descriptor in broadcast_state_descriptors:
            if not isinstance(descriptor, MapStateDescriptor):
                raise TypeError(f"broadcast() takes MapStateDescriptors, got {type(descriptor).__name__}")
            if descriptor.name in names:
                raise ValueError(f"broadcast(): two broadcast state descriptors are named {descriptor.name!r}")
            names.add(descriptor.name)
        self._input = input_stream
        self.broadcast_state_descriptors = list(broadcast_state_descriptors)

    def get_execution_environment(self) -> "StreamExecutionEnvironment":
        return self._input._env


class BroadcastConnectedStream:
    """A (keyed or not) stream connected to a BroadcastStream; ``process`` takes a
    BroadcastProcessFunction, or on a keyed stream a KeyedBroadcastProcessFunction."""

    def __init__(self, non_broadcast_stream: DataStream, broadcast_stream: BroadcastStream,
                 broadcast_state_descriptors: list[Any]) -> None:
        self.non_broadcast_stream = non_broadcast_stream
        self.broadcast_stream = broadcast_stream
        self.broadcast_state_descriptors = list(broadcast_state_descriptors)

    def process(self, func: Any, output_type: TypeInformation | None = None) -> DataStream:
        data, rules = self.non_broadcast_stream, self.broadcast_stream._input
        factory = operator_factories.BroadcastProcessFactory(func, tuple(self.broadcast_state_descriptors))
        if isinstance(data, KeyedStream):
            if not isinstance(func, fn.KeyedBroadcastProcessFunction):
                raise TypeError(
                    "A keyed stream connected to a broadcast stream needs a KeyedBroadcastProcessFunction, "
                    f"got {type(func).__name__}"
                )
            return _two_input("Co-Process-Broadcast-Keyed", data, rules, factory, output_type,
                              data._key_selector, None, data._key_type)
        if not isinstance(func, fn.BroadcastProcessFunction):
            raise TypeError(
                "A non-keyed stream connected to a broadcast stream needs a BroadcastProcessFunction"
                + (" (a KeyedBroadcastProcessFunction needs key_by(...) first)"
                   if isinstance(func, fn.KeyedBroadcastProcessFunction) else f", got {type(func).__name__}")
            )
        return _two_input("Co-Process-Broadcast", data, rules, factory, output_type)


class DataStreamSink(_Configurable):
    """The end of a pipeline; configurable like an operator."""

    def __init__(self, transformation: SinkTransformation) -> None:
        self._transformation = transformation

    def get_transformation(self) -> Transformation:
        return self._transformation


class CloseableIterator(Iterator[Any]):
    """The result of ``execute_and_collect``: iterate records, close when done (a context manager)."""

    def __init__(self, records: Iterator[Any], close: Callable[[], None] = lambda: None) -> None:
        self._records = records
        self._close = close

    def __iter__(self) -> "CloseableIterator":
        return self

    def __next__(self) -> Any:
        return next(self._records)

    def close(self) -> None:
        self._close()

    def __enter__(self) -> "CloseableIterator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# Defined in their own module (they need DataStream and KeyedStream); PyFlink has them here.
from millstream.datastream.windowed_stream import AllWindowedStream, WindowedStream  # noqa: E402
