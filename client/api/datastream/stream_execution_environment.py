"""``StreamExecutionEnvironment``: where a pipeline is declared, planned and executed."""
from __future__ import annotations

import itertools
import logging
import os
import uuid
from typing import TYPE_CHECKING, Any, Iterable

from millstream.common.configuration import Configuration
from millstream.common.execution_config import ExecutionConfig
from millstream.common.watermark_strategy import WatermarkStrategy
from millstream.common.row import Row
from millstream.common.restart_strategy import RestartStrategyConfiguration
from millstream.common.typeinfo import TypeInformation
from millstream.datastream.checkpoint_config import CheckpointConfig
from millstream.datastream.data_stream import DataStream, _check_max_parallelism, _check_parallelism
from millstream.datastream.execution_mode import CheckpointingMode, RuntimeExecutionMode
from millstream.datastream.functions import SourceFunction
from millstream.datastream.transformations import UNSET, SourceTransformation, Transformation
from millstream.runtime import config as cfg
from millstream.runtime import factories as ops

if TYPE_CHECKING:
    from millstream.client.job_graph import JobGraph
    from millstream.client.stream_graph import StreamGraph

DEFAULT_JOB_NAME = "Millstream Streaming Job"
_log = logging.getLogger(__name__)


class StreamExecutionEnvironment:
    """Collects transformations and turns them into a StreamGraph, a JobGraph and a running job."""

    def __init__(self, configuration: Configuration | None = None) -> None:
        self._configuration = Configuration(configuration)
        self._ids = itertools.count(1)
        self._transformations: list[Transformation] = []
        self._checkpoint_config = CheckpointConfig()
        self._restart_strategy: RestartStrategyConfiguration | None = None
        self._python_files: list[str] = []
        self._config = ExecutionConfig()
        # As Flink's: the configuration file (MILLSTREAM_CONFIG_FILE), MILLSTREAM_CONF_* variables
        # and then the Configuration given here set the defaults; the setters below override them.
        self._apply(cfg.load_configuration().update(self._configuration.to_dict(), source="the job's Configuration"))

    def _apply(self, settings: cfg.Configuration, only_set: bool = False) -> None:
        """Takes the execution options from ``settings`` (``only_set``: those set explicitly)."""
        def wanted(option: cfg.ConfigOption[Any]) -> bool:
            return not only_set or option in settings

        if cfg.DEFAULT_PARALLELISM in settings:
            self._parallelism = _check_parallelism(settings.get(cfg.DEFAULT_PARALLELISM), cfg.DEFAULT_PARALLELISM.key)
        elif not only_set:
            self._parallelism = _default_parallelism()
        if wanted(cfg.MAX_PARALLELISM):
            max_parallelism = settings.get(cfg.MAX_PARALLELISM)
            self._max_parallelism = UNSET if max_parallelism == -1 else _check_max_parallelism(
                max_parallelism, cfg.MAX_PARALLELISM.key)
        if wanted(cfg.RUNTIME_MODE):
            self._runtime_mode = RuntimeExecutionMode[settings.get(cfg.RUNTIME_MODE)]
        if wanted(cfg.OPERATOR_CHAINING):
            self._chaining_enabled = settings.get(cfg.OPERATOR_CHAINING)
        if wanted(cfg.BUFFER_TIMEOUT):
            self._buffer_timeout_ms = settings.get(cfg.BUFFER_TIMEOUT)
        if wanted(cfg.AUTO_WATERMARK_INTERVAL):
            self._config.set_auto_watermark_interval(settings.get(cfg.AUTO_WATERMARK_INTERVAL))
        # The job-level options the JobManager reads from the job's configuration (where it resumes
        # from, `millstream run -s`; slot.request.timeout, restart-strategy.*, checkpointing, from
        # `millstream run -D` or the environment) travel there even when they came from outside.
        own = self._configuration.to_dict()
        for option in cfg.JOBMANAGER_JOB_OPTIONS:
            if option in settings and option.key not in own:
                self._configuration.set_string(option.key, option.format(settings.get(option)))
        for key in settings.user_keys():  # no option's key: the job's own parameter (get_job_parameter)
            if cfg.find_option(key) is None and key not in own:
                self._configuration.set_string(key, str(settings.get_raw(key)))

    @staticmethod
    def get_execution_environment(configuration: Configuration | None = None) -> "StreamExecutionEnvironment":
        return StreamExecutionEnvironment(configuration)

    def _next_transformation_id(self) -> int:
        return next(self._ids)

    def _add_operator(self, transformation: Transformation) -> None:
        self._transformations.append(transformation)

    # -- settings ------------------------------------------------------------------------------

    def set_parallelism(self, parallelism: int) -> "StreamExecutionEnvironment":
        self._parallelism = _check_parallelism(parallelism, "the environment")
        return self

    def get_parallelism(self) -> int:
        return self._parallelism

    def set_max_parallelism(self, max_parallelism: int) -> "StreamExecutionEnvironment":
        self._max_parallelism = _check_max_parallelism(max_parallelism, "the environment")
        return self

    def get_max_parallelism(self) -> int:
        return self._max_parallelism

    def set_runtime_mode(self, execution_mode: RuntimeExecutionMode) -> "StreamExecutionEnvironment":
        if not isinstance(execution_mode, RuntimeExecutionMode):
            raise TypeError(f"set_runtime_mode needs a RuntimeExecutionMode, got {execution_mode!r}")
        self._runtime_mode = execution_mode
        return self

    def get_runtime_mode(self) -> RuntimeExecutionMode:
        return self._runtime_mode

    def disable_operator_chaining(self) -> "StreamExecutionEnvironment":
        self._chaining_enabled = False
        return self

    def is_chaining_enabled(self) -> bool:
        return self._chaining_enabled

    def enable_checkpointing(self, interval: int, mode: CheckpointingMode | None = None) -> "StreamExecutionEnvironment":
        self._checkpoint_config.set_checkpoint_interval(interval)
        if mode is not None:
            self._checkpoint_config.set_checkpointing_mode(mode)
        return self

    def get_checkpoint_config(self) -> CheckpointConfig:
        return self._checkpoint_config

    def get_checkpoint_interval(self) -> int:
        return self._checkpoint_config.get_checkpoint_interval()

    def get_checkpointing_mode(self) -> CheckpointingMode:
        return self._checkpoint_config.get_checkpointing_mode()

    def set_restart_strategy(self, restart_strategy_configuration: RestartStrategyConfiguration) -> "StreamExecutionEnvironment":
        if not isinstance(restart_strategy_configuration, RestartStrategyConfiguration):
            raise TypeError("set_restart_strategy needs a RestartStrategies.* configuration")
        self._restart_strategy = restart_strategy_configuration
        return self

    def get_restart_strategy(self) -> RestartStrategyConfiguration | None:
        return self._restart_strategy

    def set_buffer_timeout(self, timeout_millis: int) -> "StreamExecutionEnvironment":
        if timeout_millis < -1:
            raise ValueError("buffer timeout must be >= -1")
        self._buffer_timeout_ms = int(timeout_millis)
        return self

    def get_buffer_timeout(self) -> int:
        return self._buffer_timeout_ms

    def get_config(self) -> "ExecutionConfig":
        """The job's ExecutionConfig (PyFlink's ``env.get_config()``)."""
        return self._config

    def add_python_file(self, file_path: str) -> "StreamExecutionEnvironment":
        """Ships a module (``.py``) or an archive (``.zip``, ``.egg``, ``.whl``) with the job."""
        path = os.path.abspath(os.fspath(file_path))
        if not os.path.isfile(path):
            raise FileNotFoundError(f"add_python_file: no such file: {file_path}")
        if path not in self._python_files:
            self._python_files.append(path)
        return self

    def add_python_archive(self, archive_path: str, target_dir: str | None = None) -> "StreamExecutionEnvironment":
        return self.add_python_file(archive_path)

    def get_python_files(self) -> list[str]:
        return list(self._python_files)

    def configure(self, configuration: Configuration) -> "StreamExecutionEnvironment":
        """Adds ``configuration``'s keys; execution options among them (``parallelism.default``,
        ``execution.buffer-timeout``, ...) take effect, as in PyFlink."""
        self._configuration.add_all(configuration)
        self._apply(cfg.Configuration.from_dict(configuration.to_dict(), source="configure()"), only_set=True)
        return self

    def get_configuration(self) -> Configuration:
        return self._configuration

    # -- sources -------------------------------------------------------------------------------

    def _source(self, name: str, factory: ops.SourceFactory, type_info: Any, parallelism: int | None = None) -> DataStream:
        t = SourceTransformation(self, f"{name}", factory, parallelism or self._parallelism, type_info)
        return DataStream(t, self)

    def from_collection(self, collection: Iterable[Any], type_info: TypeInformation | None = None) -> DataStream:
        elements = list(collection)
        if type_info is not None and type_info.name == "ROW":
            elements = [_as_row(e, type_info) for e in elements]
        return self._source("Collection Source", ops.CollectionSourceFactory(elements=elements), type_info, 1)

    def from_sequence(self, start: int, end: int) -> DataStream:
        if end < start:
            raise ValueError(f"from_sequence needs start <= end, got {start}..{end}")
        return self._source("Sequence Source", ops.SequenceSourceFactory(start=int(start), end=int(end)), None)

    def read_text_file(self, file_path: str, charset_name: str = "UTF-8") -> DataStream:
        from millstream.datastream.connectors.file_system import _local_path

        factory = ops.TextFileSourceFactory(paths=(_local_path(file_path),), charset=charset_name.lower())
        return self._source("Read Text File", factory, None)

    def add_source(self, source_func: SourceFunction, source_name: str = "Custom Source", type_info: Any = None) -> DataStream:
        if not isinstance(source_func, SourceFunction):
            raise TypeError(f"add_source needs a SourceFunction, got {type(source_func).__name__}")
        return self._source(source_name, ops.SourceFunctionFactory(function=source_func), type_info)

    def from_source(self, source: Any, watermark_strategy: Any, source_name: str, type_info: Any = None) -> DataStream:
        make_factory = getattr(source, "_source_factory", None)
        if not callable(make_factory):
            raise TypeError(f"from_source needs a Source such as FileSource, got {type(source).__name__}")
        if not isinstance(watermark_strategy, WatermarkStrategy):
            raise TypeError(f"from_source needs a WatermarkStrategy, got {type(watermark_strategy).__name__}")
        factory = make_factory()
        factory.watermark_strategy = watermark_strategy
        return self._source(source_name, factory, type_info)

    # -- plans and execution -------------------------------------------------------------------

    def get_stream_graph(self, job_name: str | None = None, clear_transformations: bool = False) -> "StreamGraph":
        from millstream.client.stream_graph import StreamGraphGenerator

        graph = StreamGraphGenerator(self, self._transformations).generate(job_name or DEFAULT_JOB_NAME)
        if clear_transformations:
            self._transformations = []
        return graph

    def get_execution_plan(self) -> str:
        """The StreamGraph as JSON, in the shape of Flink's execution plan."""
        return self.get_stream_graph().to_json()

    def get_job_graph(self, job_name: str | None = None) -> "JobGraph":
        from millstream.client.job_graph import JobGraphGenerator

        return JobGraphGenerator(self.get_stream_graph(job_name)).generate()

    def execute(self, job_name: str | None = None) -> Any:
        from millstream.client.execution import execute

        job_graph = self.get_job_graph(job_name)
        self._transformations = []
        return execute(job_graph, self._configuration, self._python_files)

    def _execute_and_collect(self, stream: DataStream, job_name: str | None, limit: int | None) -> Any:
        from millstream.client.execution import execute_and_collect

        collect_id = uuid.uuid4().hex
        stream._sink("Collect Sink", ops.CollectSinkFactory(collect_id=collect_id))
        job_graph = self.get_job_graph(job_name)
        self._transformations = []
        return execute_and_collect(job_graph, self._configuration, self._python_files, collect_id, limit)


def _default_parallelism() -> int:
    """Flink's default: a local environment uses every CPU core; a job for a cluster uses 1 (the
    cluster's ``parallelism.default``) unless the program or ``-p`` says otherwise."""
    if os.environ.get(cfg.ENV_JOBMANAGER):
        return 1
    return os.cpu_count() or 1


def _as_row(element: Any, type_info: TypeInformation) -> Row:
    """A ROW-typed collection hands functions ``Row`` objects with the type's field names, as PyFlink."""
    names = type_info.field_names
    if isinstance(element, Row):
        values = list(element)
    elif isinstance(element, (tuple, list)):
        values = list(element)
    else:
        raise TypeError(f"An element of a collection of type {type_info} must be a tuple, list or Row, got {element!r}")
    if len(values) != len(names):
        raise ValueError(f"An element of a collection of type {type_info} needs {len(names)} fields, got {element!r}")
    row = Row.of_names(names, values)
    if isinstance(element, Row):
        row.set_row_kind(element.get_row_kind())
    return row
