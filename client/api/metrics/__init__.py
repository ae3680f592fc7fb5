"""PyFlink's ``pyflink.metrics``: the MetricGroup user functions get from
``runtime_context.get_metrics_group()``, and the metric types it registers."""
from millstream.runtime.metrics.groups import MetricGroup
from millstream.runtime.metrics.types import Counter, Distribution, Gauge, Meter

__all__ = ["MetricGroup", "Counter", "Meter", "Gauge", "Distribution"]
