"""Running operators: what a task builds from each operator factory and pushes records through.

``base`` holds the operator base class, the stateless and keyed one-input operators, reduce,
aggregations and the source head; ``process`` the process-function operators; ``co_process``
the two-input operators (connect, broadcast state); ``sinks`` the sinks;
``sources`` the source readers; ``window`` the window operator; ``combiner`` the BATCH pre-aggregation before a keyed exchange.
:func:`create_operator` maps every factory to its operator.
"""
from __future__ import annotations

from typing import Any, Callable

from millstream.datastream import functions as fn
from millstream.runtime import operator_factories
from millstream.runtime.operators import async_wait, base, co_process, event_time, file_sink, jdbc_sink, kafka_sink, process as proc, sinks, window

_KEYED: dict[type, tuple[type[base._KeyedRecordOperator], type, str]] = {
    operator_factories.MapFactory: (base.KeyedMapOperator, fn._MapWrapper, "map"),
    operator_factories.FlatMapFactory: (base.KeyedFlatMapOperator, fn._FlatMapWrapper, "flat_map"),
    operator_factories.FilterFactory: (base.KeyedFilterOperator, fn._FilterWrapper, "filter"),
}


def create_operator(factory: operator_factories.OperatorFactory, ctx: base.OperatorContext) -> base.StreamOperator:
    """The runtime operator for ``factory``; map/flat_map/filter on a keyed stream get keyed variants."""
    if isinstance(factory, operator_factories.SourceFactory):
        return base.SourceOperator(factory, ctx)
    two_input = co_process.create_two_input_operator(factory, ctx)
    if two_input is not None:
        return two_input
    keyed = _KEYED.get(type(factory)) if ctx.key_selector is not None else None
    if keyed is not None:
        cls, wrapper, method = keyed
        return cls(factory, ctx, base.call_target(factory.user_function(), wrapper, method))
    operators: dict[type, Callable[[Any, base.OperatorContext], base.StreamOperator]] = {
        operator_factories.MapFactory: base.MapOperator,
        operator_factories.FlatMapFactory: base.FlatMapOperator,
        operator_factories.FilterFactory: base.FilterOperator,
        operator_factories.ProcessFactory: proc.ProcessOperator,
        operator_factories.TimestampsAndWatermarksFactory: event_time.TimestampsAndWatermarksOperator,
        operator_factories.RestampFactory: event_time.RestampOperator,
        operator_factories.KeyedProcessFactory: proc.KeyedProcessOperator,
        operator_factories.ReduceFactory: base.ReduceOperator,
        operator_factories.WindowFactory: window.WindowOperator,
        operator_factories.AggregationFactory: base.AggregationOperator,
        operator_factories.PrintSinkFactory: sinks.PrintSinkOperator,
        operator_factories.SinkFunctionFactory: sinks.SinkFunctionOperator,
        operator_factories.FileSinkFactory: file_sink.FileSinkOperator,
        operator_factories.KafkaSinkFactory: kafka_sink.KafkaSinkOperator,
        operator_factories.CollectSinkFactory: sinks.CollectSinkOperator,
        operator_factories.JdbcSinkFactory: jdbc_sink.JdbcSinkOperator,
        operator_factories.AsyncWaitFactory: async_wait.AsyncWaitOperator,
    }
    make = operators.get(type(factory))
    if make is None:
        raise TypeError(f"Operator '{ctx.name}': no runtime operator for {type(factory).__name__} ({factory.kind})")
    return make(factory, ctx)
