"""``StreamExecutionEnvironment``: where a pipeline is declared, planned and executed."""
from __future__ import annotations

import itertools
import logging
import os
import uuid
import zipfile
from typing import TYPE_CHECKING, Any, Iterable

from millstream.common.configuration import Configuration
from millstream.common.execution_config import ExecutionConfig
from millstream.common.watermark_strategy import WatermarkStrategy
from millstream.common.row import Row
from millstream.common.restart_strategy import RestartStrategyConfiguration
from millstream.common.typeinfo import TypeInformation
from millstream.datastream.checkpoint_config import CheckpointConfig
from millstream.datastream.connectors.file_system import _local_path
from millstream.datastream.data_stream import DataStream, _check_max_parallelism, _check_parallelism
from millstream.datastream.execution_mode import CheckpointingMode, RuntimeExecutionMode
from millstream.datastream.functions import SourceFunction
from millstream.datastream.slot_sharing_group import SlotSharingGroup
from millstream.datastream.state_backend import STATE_BACKEND_TYPE_KEY, StateBackend, state_backend_of_type
from millstream.datastream.transformations import UNSET, SourceTransformation, Transformation
from millstream.runtime import config as cfg
from millstream.runtime import operator_factories
from millstream.runtime.artifact_names import check_archive_target
from millstream.runtime.narrowing import value_narrower
from millstream.runtime.python_requirements import REQUIREMENTS_ARTIFACT, REQUIREMENTS_FILE

if TYPE_CHECKING:
    from millstream.client.job_graph import JobGraph
    from millstream.client.stream_graph import StreamGraph
    from millstream.datastream.state_backend import StateBackend

DEFAULT_JOB_NAME = "Millstream Streaming Job"
_log = logging.getLogger(__name__)


class StreamExecutionEnvironment:
    """Collects transformations and turns them into a StreamGraph, a JobGraph and a running job."""

    _default_local_parallelism: int | None = None  # set_default_local_parallelism: one per process, as Flink's static

    def __init__(self, configuration: Configuration | None = None) -> None:
        self._configuration = Configuration(configuration)
        self._ids = itertools.count(1)
        self._transformations: list[Transformation] = []
        self._checkpoint_config = CheckpointConfig()
        self._restart_strategy: RestartStrategyConfiguration | None = None
        self._python_files: list[str] = []
        self._python_archives: list[tuple[str, str]] = []  # (zip path, directory in the task's working dir)
        self._config = ExecutionConfig()
        self._slot_sharing_groups: dict[str, Any] = {}
        self._cached_files: dict[str, tuple[str, bool]] = {}  # name -> SlotSharingGroup (its resource spec)
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
        self._checkpoint_config._configure(settings)  # the execution.checkpointing.* keys set, as PyFlink
        if cfg.STATE_BACKEND_TYPE in settings:
            settings.get(cfg.STATE_BACKEND_TYPE)  # a state backend Millstream lacks is refused here, named
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

    def set_default_local_parallelism(self, parallelism: int) -> "StreamExecutionEnvironment":
        """Sets the parallelism of local environments created from now on (Flink's static
        ``setDefaultLocalParallelism``: the core count until set); this environment keeps its own."""
        StreamExecutionEnvironment._default_local_parallelism = _check_parallelism(parallelism, "the default local parallelism")
        return self

    def get_default_local_parallelism(self) -> int:
        """The parallelism a new local environment starts with (the number of cores until set)."""
        return StreamExecutionEnvironment._default_local_parallelism or (os.cpu_count() or 1)

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
        """Ships a zip archive that every task finds extracted in its working directory, under
        ``target_dir`` or, without one, under the archive's file name (PyFlink's rule): after
        ``add_python_archive("data.zip", "data")`` a function may ``open("data/data.txt")``."""
        path = os.path.abspath(os.fspath(archive_path))
        if not os.path.isfile(path):
            raise FileNotFoundError(f"add_python_archive: no such file: {archive_path}")
        if not zipfile.is_zipfile(path):
            raise ValueError(f"add_python_archive: {archive_path} is not a zip archive (only zip archives are supported)")
        name = os.path.basename(path)
        if not name.endswith(".zip"):
            raise ValueError(f"add_python_archive: the archive's file name must end in .zip, got {name!r}")
        target = check_archive_target(os.path.basename(path) if target_dir is None else os.fspath(target_dir))
        for other, _ in self._python_archives:
            if os.path.basename(other) == name and other != path:
                raise ValueError(f"add_python_archive: another archive named {name!r} was added already ({other})")
        if (path, target) not in self._python_archives:
            self._python_archives.append((path, target))
        return self

    def register_slot_sharing_group(self, slot_sharing_group: Any) -> "StreamExecutionEnvironment":
        """Registers a SlotSharingGroup's resource spec under its name, for operators that name the
        group (``slot_sharing_group("name")``). Registering another spec under the same name is an
        error, as in Flink."""
        if not isinstance(slot_sharing_group, SlotSharingGroup):
            raise TypeError(f"register_slot_sharing_group needs a SlotSharingGroup, got {type(slot_sharing_group).__name__}")
        _add_slot_sharing_group(self._slot_sharing_groups, slot_sharing_group)
        return self

    def _slot_sharing_group_specs(self) -> dict[str, Any]:
        """The registered groups and those given to ``slot_sharing_group(group)`` on the pipeline's
        operators and sinks (one spec per name, or an error, as Flink checks when it plans)."""
        specs = dict(self._slot_sharing_groups)
        seen: set[int] = set()
        pending = list(self._transformations)
        while pending:
            t = pending.pop()
            if id(t) in seen:
                continue
            seen.add(id(t))
            pending.extend(t.inputs)
            spec = getattr(t, "slot_sharing_group_spec", None)
            if spec is not None:
                _add_slot_sharing_group(specs, spec)
        return specs

    # -- the job's Python environment and PyFlink's other environment settings ----------------

    def set_python_requirements(self, requirements_file_path: str,
                                requirements_cache_dir: str | None = None) -> "StreamExecutionEnvironment":
        """Third-party packages for the job: each TaskManager machine pip-installs
        ``requirements_file_path`` once per job into the job's directory, ahead of everything else
        on its tasks' ``sys.path``. With ``requirements_cache_dir`` (packages downloaded before,
        e.g. ``pip download -d DIR -r requirements.txt``) pip installs from it alone
        (``--no-index --find-links``), as PyFlink does, so the cluster needs no network."""
        import tempfile
        import zipfile


        requirements = os.path.abspath(os.fspath(requirements_file_path))
        if not os.path.isfile(requirements):
            raise FileNotFoundError(f"set_python_requirements: no such requirements file: {requirements_file_path}")
        cache = os.path.abspath(os.fspath(requirements_cache_dir)) if requirements_cache_dir is not None else None
        if cache is not None and not os.path.isdir(cache):
            raise FileNotFoundError(f"set_python_requirements: no such cache directory: {requirements_cache_dir}")
        # One artifact holds the file and the cache (artifacts are single files); made now, as the
        # program declares it, in a directory of this environment's own.
        bundle_dir = tempfile.mkdtemp(prefix="millstream-requirements-")
        bundle = os.path.join(bundle_dir, REQUIREMENTS_ARTIFACT)
        with zipfile.ZipFile(bundle, "w", zipfile.ZIP_STORED) as z:
            z.write(requirements, REQUIREMENTS_FILE)
            for root, _, files in os.walk(cache) if cache is not None else ():
                for name in files:
                    path = os.path.join(root, name)
                    z.write(path, os.path.join("cache", os.path.relpath(path, cache)))
        self._python_files = [f for f in self._python_files if os.path.basename(f) != REQUIREMENTS_ARTIFACT]
        self._python_files.append(bundle)
        self._configuration.set_string("python.requirements",
                                       requirements if cache is None else f"{requirements}#{cache}")
        return self

    def set_python_executable(self, python_exec: str) -> "StreamExecutionEnvironment":
        """The interpreter the job's tasks must run under. A TaskManager's Spark workers run the one
        it started its SparkSession with, for every job, so a task fails at its start with a message
        saying so when this names another one; naming that one is accepted."""
        if not isinstance(python_exec, str) or not python_exec:
            raise ValueError(f"set_python_executable needs the path of a Python interpreter, got {python_exec!r}")
        self._configuration.set_string("python.executable", python_exec)
        return self

    def register_cached_file(self, file_path: str, name: str, executable: bool = False) -> "StreamExecutionEnvironment":
        """Registers a file under ``name`` for the job (Flink's distributed cache). PyFlink offers
        its functions no way to read it back (its RuntimeContext has no distributed cache), so the
        registration is recorded in ``pipeline.cached-files`` as PyFlink records it, and checked."""
        if not isinstance(name, str) or not name:
            raise ValueError("register_cached_file needs a non-empty name")
        if name in self._cached_files:
            raise ValueError(f"register_cached_file: a cached file named '{name}' is registered already")
        local = file_path[len("file://"):] if str(file_path).startswith("file://") else str(file_path)
        if "://" not in local and not os.path.exists(local):
            raise FileNotFoundError(f"register_cached_file: no such file: {file_path}")
        self._cached_files[name] = (str(file_path), bool(executable))
        self._configuration.set_string("pipeline.cached-files", ";".join(
            f"name:{n},path:{p},executable:{str(x).lower()}" for n, (p, x) in self._cached_files.items()))
        return self

    def get_cached_files(self) -> list[tuple[str, str]]:
        """The files registered with ``register_cached_file``: (name, path) pairs."""
        return [(n, p) for n, (p, _) in self._cached_files.items()]

    def set_default_savepoint_directory(self, directory: str) -> "StreamExecutionEnvironment":
        """Where this job's savepoints go when one is triggered without a directory (the job's
        ``execution.checkpointing.savepoint-dir``, ahead of the cluster's)."""
        if not isinstance(directory, str) or not directory:
            raise ValueError(f"set_default_savepoint_directory needs a directory, got {directory!r}")
        self._configuration.set_string(cfg.CHECKPOINTING_SAVEPOINT_DIR.key, directory)
        return self

    def get_default_savepoint_directory(self) -> str | None:
        return self._configuration.to_dict().get(cfg.CHECKPOINTING_SAVEPOINT_DIR.key)

    def set_state_backend(self, state_backend: "StateBackend") -> "StreamExecutionEnvironment":
        """The job's state backend: ``HashMapStateBackend`` (heap keyed state) or
        ``EmbeddedRocksDBStateBackend``, recorded as ``state.backend.type`` in the job's configuration."""
        if not isinstance(state_backend, StateBackend) or not state_backend.type_name:
            raise TypeError(f"set_state_backend needs a StateBackend such as HashMapStateBackend(), got {state_backend!r}")
        self._configuration.set_string(STATE_BACKEND_TYPE_KEY, state_backend.type_name)
        for key, value in getattr(state_backend, "_job_settings", dict)().items():  # RocksDB's incremental flag
            self._configuration.set_string(key, value)
        return self

    def get_state_backend(self) -> "StateBackend | None":
        """The backend set by :meth:`set_state_backend` or ``state.backend.type``; None when neither."""
        return state_backend_of_type(self._configuration.to_dict().get(STATE_BACKEND_TYPE_KEY))

    def enable_changelog_state_backend(self, enabled: bool) -> "StreamExecutionEnvironment":
        """Flink's changelog state backend makes checkpoints incremental and faster; it never
        changes results. Recorded (``state.changelog.enabled``); Millstream's heap state backend
        writes full snapshots either way, which is said at INFO."""
        if not isinstance(enabled, bool):
            raise TypeError(f"enable_changelog_state_backend needs a bool, got {enabled!r}")
        self._configuration.set_string("state.changelog.enabled", str(enabled).lower())
        if enabled:
            _log.info("enable_changelog_state_backend(True): recorded; Millstream's heap state backend takes "
                      "full snapshots, so checkpoints stay full (results are the same)")
        return self

    def is_changelog_state_backend_enabled(self) -> bool | None:
        """True / False as set, None when never set (Flink's undefined: the cluster decides)."""
        value = self._configuration.to_dict().get("state.changelog.enabled")
        return None if value is None else value == "true"

    def add_jars(self, *jars_path: str) -> "StreamExecutionEnvironment":
        """Accepted and recorded in ``pipeline.jars``; a Millstream job runs no JVM code of its own
        (its operators are Python, and Spark's JVM is the TaskManager's), so nothing loads them."""
        return self._jvm_paths("pipeline.jars", "add_jars", jars_path)

    def add_classpaths(self, *classpaths: str) -> "StreamExecutionEnvironment":
        """Accepted and recorded in ``pipeline.classpaths``; ignored like :meth:`add_jars`."""
        return self._jvm_paths("pipeline.classpaths", "add_classpaths", classpaths)

    def _jvm_paths(self, key: str, what: str, paths: tuple[str, ...]) -> "StreamExecutionEnvironment":
        for path in paths:
            if not isinstance(path, str) or not path:
                raise ValueError(f"{what} needs URLs such as 'file:///path/to/x.jar', got {path!r}")
        known = [p for p in self._configuration.to_dict().get(key, "").split(";") if p]
        self._configuration.set_string(key, ";".join(dict.fromkeys([*known, *paths])))
        _log.info("%s(%s): ignored: a Millstream job has no JVM code to load them into (its operators run in "
                  "Python; Spark's JVM belongs to the TaskManager)", what, ", ".join(paths))
        return self

    def _artifacts(self) -> list[Any]:
        """What every way of running a job ships with it: python files, then archives."""
        return [*self._python_files, *self._python_archives]

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

    def _source(self, name: str, factory: operator_factories.SourceFactory, type_info: Any) -> DataStream:
        # Flink's rule: a non-parallel source (a collection, a plain SourceFunction) runs at
        # parallelism 1, whatever the environment's; a parallel one takes the environment's.
        parallelism = self._parallelism if factory.parallel else 1
        t = SourceTransformation(self, f"{name}", factory, parallelism, type_info)
        return DataStream(t, self)

    def from_collection(self, collection: Iterable[Any], type_info: TypeInformation | None = None) -> DataStream:
        elements = list(collection)
        if type_info is not None and type_info.name == "ROW":
            elements = [_as_row(e, type_info) for e in elements]
        narrow = value_narrower(type_info)  # PyFlink converts the elements to the type's Java values
        if narrow is not None:
            elements = [narrow(e) for e in elements]
        return self._source("Collection Source", operator_factories.CollectionSourceFactory(elements=elements), type_info)

    def from_sequence(self, start: int, end: int) -> DataStream:
        if end < start:
            raise ValueError(f"from_sequence needs start <= end, got {start}..{end}")
        return self._source("Sequence Source", operator_factories.SequenceSourceFactory(start=int(start), end=int(end)), None)

    def read_text_file(self, file_path: str, charset_name: str = "UTF-8") -> DataStream:
        factory = operator_factories.TextFileSourceFactory(paths=(_local_path(file_path),), charset=charset_name.lower())
        return self._source("Read Text File", factory, None)

    def add_source(self, source_func: SourceFunction, source_name: str = "Custom Source", type_info: Any = None) -> DataStream:
        make_factory = getattr(source_func, "_source_factory", None)
        if callable(make_factory) and not isinstance(source_func, SourceFunction):  # FlinkKafkaConsumer
            return self._source(source_name, make_factory(), type_info or source_func.get_produced_type())
        if not isinstance(source_func, SourceFunction):
            raise TypeError(f"add_source needs a SourceFunction, got {type(source_func).__name__}")
        return self._source(source_name, operator_factories.SourceFunctionFactory(function=source_func), type_info)

    def create_input(self, input_format: Any, type_info: Any = None) -> DataStream:
        """The records of an input format that names its own path (PyFlink's ``AvroInputFormat``):
        its files, read whole by one subtask each, as a bounded FileSource with that format."""
        path = getattr(input_format, "path", None)
        if not isinstance(path, str) or not callable(getattr(input_format, "_read_file", None)):
            raise TypeError(f"create_input needs an input format with a path, such as AvroInputFormat, "
                            f"got {type(input_format).__name__}")
        factory = operator_factories.FormatFileSourceFactory(paths=(path,), file_format=input_format)
        return self._source("Custom Source", factory, type_info)

    def from_source(self, source: Any, watermark_strategy: Any, source_name: str, type_info: Any = None) -> DataStream:
        make_factory = getattr(source, "_source_factory", None)
        if not callable(make_factory):
            raise TypeError(f"from_source needs a Source such as FileSource, got {type(source).__name__}")
        if not isinstance(watermark_strategy, WatermarkStrategy):
            raise TypeError(f"from_source needs a WatermarkStrategy, got {type(watermark_strategy).__name__}")
        factory = make_factory()
        factory.watermark_strategy = watermark_strategy
        if type_info is None:  # PyFlink: a KafkaSource produces its deserializer's type
            produced = getattr(source, "_produced_type", None)
            type_info = produced() if callable(produced) else None
        return self._source(source_name, factory, type_info)

    # -- plans and execution -------------------------------------------------------------------

    def get_stream_graph(self, job_name: str | None = None, clear_transformations: bool = False) -> "StreamGraph":
        from millstream.client.stream_graph import StreamGraphGenerator  # lazy: the client loads when a job is planned

        graph = StreamGraphGenerator(self, self._transformations).generate(job_name or DEFAULT_JOB_NAME)
        if clear_transformations:
            self._transformations = []
        return graph

    def get_execution_plan(self) -> str:
        """The StreamGraph as JSON, in the shape of Flink's execution plan."""
        return self.get_stream_graph().to_json()

    def get_job_graph(self, job_name: str | None = None) -> "JobGraph":
        from millstream.client.job_graph import JobGraphGenerator  # lazy: the client loads when a job is planned

        specs = self._slot_sharing_group_specs()
        job_graph = JobGraphGenerator(self.get_stream_graph(job_name)).generate()
        used = {v.slot_sharing_group for v in job_graph.proto.vertices}
        for name, group in sorted(specs.items()):
            if name in used and group.has_resources():
                _log.info("Slot sharing group '%s' asks for %s: Millstream's slots are uniform shares of a "
                          "TaskManager (taskmanager.numberOfTaskSlots), so the group gets its own slots but "
                          "the spec does not size them", name, group.describe())
        return job_graph

    def execute(self, job_name: str | None = None) -> Any:
        from millstream.client.execution import execute  # lazy: gRPC and the client load when a job runs

        job_graph = self.get_job_graph(job_name)
        self._transformations = []
        return execute(job_graph, self._configuration, self._artifacts())

    def execute_async(self, job_name: str | None = None) -> Any:
        """Submits the job and returns a :class:`~millstream.common.JobClient` without waiting for
        it to end (PyFlink's ``execute_async``)."""
        from millstream.client.execution import execute_async  # lazy: gRPC and the client load when a job runs

        job_graph = self.get_job_graph(job_name)
        self._transformations = []
        return execute_async(job_graph, self._configuration, self._artifacts())

    def _execute_and_collect(self, stream: DataStream, job_name: str | None, limit: int | None) -> Any:
        from millstream.client.execution import execute_and_collect  # lazy: gRPC and the client load when a job runs

        collect_id = uuid.uuid4().hex
        sink = stream._sink("Collect Sink", operator_factories.CollectSinkFactory(collect_id=collect_id))
        # Flink's collect sink always runs at parallelism 1 (one result stream, in order): a
        # parallelism-1 pipeline chains into it and hands its records over in their order.
        sink.get_transformation().parallelism = 1
        job_graph = self.get_job_graph(job_name)
        self._transformations = []
        return execute_and_collect(job_graph, self._configuration, self._artifacts(),
                                   collect_id, limit)


def _default_parallelism() -> int:
    """Flink's default: a local environment uses every CPU core (or what
    ``set_default_local_parallelism`` set); a job for a cluster uses 1 (the cluster's
    ``parallelism.default``) unless the program or ``-p`` says otherwise."""
    if os.environ.get(cfg.ENV_JOBMANAGER):
        return 1
    return StreamExecutionEnvironment._default_local_parallelism or (os.cpu_count() or 1)


def _add_slot_sharing_group(specs: dict[str, Any], group: Any) -> None:
    name = group.get_name()
    known = specs.get(name)
    if known is not None and known != group:
        raise ValueError(f"Slot sharing group '{name}' is registered with two different resource specs: "
                         f"{known.describe()} and {group.describe()}")
    specs[name] = group


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
