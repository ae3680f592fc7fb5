"""Metric groups (PyFlink's ``MetricGroup``) and a task's registry of them, with the snapshot the
task sends to its TaskManager every reporting interval.

Scopes follow Flink's: a task's group holds its I/O metrics, each operator of its chain has a
group (what ``runtime_context.get_metrics_group()`` returns), and user groups nest below. A
metric's *identifier* is its scope relative to the task joined by dots, as Flink's REST API names
it under a subtask (``<operator>.<group>.<name>``, the vertex endpoint prefixes the subtask
index). Its *Prometheus name* is its logical scope joined by underscores (a key/value group keeps
its key in the name and puts its value in a label), as Flink's PrometheusReporter names it.
"""
from __future__ import annotations

import math
import re
import time
from typing import Any, Callable, Union

from millstream.runtime.metrics.types import DISTRIBUTION_STATS, Counter, Distribution, Gauge, Meter

__all__ = ["MetricGroup", "TaskMetricGroup", "MetricDescriptor", "sanitize"]

Metric = Union[Counter, Meter, Gauge, Distribution]
# (Prometheus name below the task scope, e.g. "operator_mygroup_hits", and its extra labels).
MetricDescriptor = tuple[str, dict[str, str]]

_INVALID = re.compile(r"[^A-Za-z0-9_\-]")
_INVALID_PROMETHEUS = re.compile(r"[^A-Za-z0-9_]")


def sanitize(name: str) -> str:
    """A scope component as Flink's metric query service writes it: characters other than letters,
    digits, '_' and '-' become '_' (so "Source: numbers" is "Source__numbers")."""
    return _INVALID.sub("_", name)


def _prometheus(name: str) -> str:
    return _INVALID_PROMETHEUS.sub("_", name)


def _check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a {what} name must be a non-empty string, got {name!r}")
    return name


class MetricGroup:
    """A named container of metrics and subgroups (PyFlink's MetricGroup)."""

    def __init__(self, registry: "TaskMetricGroup", scope: tuple[str, ...], logical: tuple[str, ...],
                 labels: dict[str, str]) -> None:
        self._registry = registry
        self._scope = scope        # identifier components below the task
        self._logical = logical    # Prometheus name components below the task
        self._labels = labels      # extra Prometheus labels (operator_name, key/value groups)
        self._groups: dict[tuple[str, str | None], MetricGroup] = {}

    def add_group(self, name: str, extra: str | None = None) -> "MetricGroup":
        """A subgroup ``name``; with ``extra``, a key/value pair: the key group ``name`` holding the
        value group ``extra`` (the returned one), whose metrics carry the label ``name=extra``."""
        _check_name(name, "group")
        if extra is not None:
            _check_name(extra, "group value")
        group = self._groups.get((name, extra))
        if group is None:
            if extra is None:
                group = MetricGroup(self._registry, self._scope + (sanitize(name),),
                                    self._logical + (_prometheus(name),), self._labels)
            else:
                group = MetricGroup(self._registry, self._scope + (sanitize(name), sanitize(extra)),
                                    self._logical + (_prometheus(name),), {**self._labels, _prometheus(name): extra})
            self._groups[(name, extra)] = group
        return group

    def counter(self, name: str) -> Counter:
        return self._register(name, Counter, Counter)

    def meter(self, name: str, time_span_in_seconds: int = 60) -> Meter:
        return self._register(name, Meter, lambda: Meter(time_span_in_seconds, self._registry.clock))

    def gauge(self, name: str, obj: Callable[[], float]) -> Gauge:
        return self._register(name, Gauge, lambda: Gauge(obj))

    def distribution(self, name: str) -> Distribution:
        return self._register(name, Distribution, Distribution)

    def get_scope_components(self) -> list[str]:
        """The group's scope below its task, e.g. ``["Map", "region", "eu"]`` (PyFlink's include the
        host, TaskManager, job and task before it; the REST API and the reporter add those)."""
        return list(self._scope)

    def get_all_variables(self) -> dict[str, str]:
        """The scope's variables, e.g. ``{"<job_name>": ..., "<task_name>": ..., "<subtask_index>": ...,
        "<operator_name>": "Map", "<region>": "eu"}`` (a key/value group adds its key)."""
        return {f"<{name}>": value for name, value in {**self._registry.variables, **self._labels}.items()}

    def get_metric_identifier(self, metric_name: str) -> str:
        """The identifier ``metric_name`` has in this group below its task, as the REST API shows it
        after the subtask index (``Map.region.eu.hits``)."""
        return ".".join(self._scope + (sanitize(metric_name),))

    def _register(self, name: str, kind: type, make: Callable[[], Any]) -> Any:
        _check_name(name, "metric")
        identifier = ".".join(self._scope + (sanitize(name),))
        existing = self._registry.metrics.get(identifier)
        if existing is not None:
            if type(existing) is not kind:
                raise ValueError(f"metric '{identifier}' is registered already as a {type(existing).__name__}, "
                                 f"not a {kind.__name__}")
            return existing  # PyFlink users re-register in every open(): hand back the same metric
        metric = make()
        self._registry.add(identifier, metric, ("_".join(self._logical + (_prometheus(name),)), dict(self._labels)))
        return metric


class TaskMetricGroup(MetricGroup):
    """A task's metric groups: the registry behind every group of the task, and its snapshot."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.variables: dict[str, str] = {}  # the task's scope variables (job_name, task_name, ...), set by its environment
        self.metrics: dict[str, Metric] = {}
        self._descriptors: dict[str, MetricDescriptor] = {}
        self.version = 0  # bumped by every registration: the descriptors are sent again
        self._operators: dict[str, MetricGroup] = {}
        super().__init__(self, (), (), {})

    def operator_group(self, operator_name: str) -> MetricGroup:
        """The group of the chain's operator ``operator_name`` (Flink's OperatorMetricGroup)."""
        group = self._operators.get(operator_name)
        if group is None:
            group = MetricGroup(self, (sanitize(operator_name),), ("operator",), {"operator_name": operator_name})
            self._operators[operator_name] = group
        return group

    def add(self, identifier: str, metric: Metric, descriptor: MetricDescriptor) -> None:
        self.metrics[identifier] = metric
        self._descriptors[identifier] = descriptor
        self.version += 1

    def snapshot(self) -> dict[str, float]:
        """Every registered metric as plain numbers: a counter's count, a meter's rate, a gauge's
        value (a gauge that fails or is not a finite number is left out: JSON has no NaN), a distribution's statistics as
        ``<identifier>_<stat>``."""
        values: dict[str, float] = {}
        for identifier, metric in list(self.metrics.items()):  # a copy: open() may register meanwhile
            if type(metric) is Counter:
                values[identifier] = float(metric.get_count())
            elif type(metric) is Meter:
                values[identifier] = metric.get_rate()
            elif type(metric) is Gauge:
                try:
                    value = metric.get_value()
                except Exception:  # a user gauge must not take the task down; it is just not reported
                    continue
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    values[identifier] = float(value)
            elif type(metric) is Distribution:
                for stat, value in metric.statistics().items():
                    values[f"{identifier}_{stat}"] = value
        return values

    def descriptors(self) -> dict[str, MetricDescriptor]:
        """Each snapshot key's Prometheus name (below the task scope) and extra labels."""
        result: dict[str, MetricDescriptor] = {}
        for identifier, (name, labels) in list(self._descriptors.items()):
            if type(self.metrics[identifier]) is Distribution:
                for stat in DISTRIBUTION_STATS:
                    result[f"{identifier}_{stat}"] = (f"{name}_{stat}", labels)
            else:
                result[identifier] = (name, labels)
        return result
