"""Metrics: the types and groups user functions register (PyFlink's API), a task's I/O metrics,
and the Prometheus reporter. Pure except :mod:`millstream.runtime.metrics.prometheus`."""
from millstream.runtime.metrics.groups import MetricGroup, TaskMetricGroup
from millstream.runtime.metrics.types import Counter, Distribution, Gauge, Meter

__all__ = ["Counter", "Distribution", "Gauge", "Meter", "MetricGroup", "TaskMetricGroup"]
