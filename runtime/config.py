"""Configuration options, declared once, and the layered loader.

Every option a Millstream process reads is a :class:`ConfigOption` in the registry below, with
Flink's key and default wherever Flink has one, so a Flink user finds each knob where they expect
it. :func:`load_configuration` layers defaults -> YAML file -> environment -> ``-D key=value``, a
later layer winning. Unregistered keys are kept as user job parameters. The documentation table is
generated from the registry: ``python -m millstream.runtime.config``.
"""

from __future__ import annotations

import difflib
import enum
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

import yaml

log = logging.getLogger(__name__)
T = TypeVar("T")

ENV_PREFIX = "MILLSTREAM_CONF_"  # MILLSTREAM_CONF_HEARTBEAT_TIMEOUT=5s sets heartbeat.timeout
ENV_JOBMANAGER = "MILLSTREAM_JOBMANAGER"  # host:port -> jobmanager.rpc.address and .port
ENV_CONFIG_FILE = "MILLSTREAM_CONFIG_FILE"  # YAML file read when load_configuration gets none


class ConfigurationError(ValueError):
    """A value, file or override that cannot be used; the message names the key or the path."""


class OptionType(str, enum.Enum):
    """Value type of an option; the comment gives what :meth:`Configuration.get` returns."""

    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    STRING = "string"
    DURATION = "duration"  # int, milliseconds
    MEMORY_SIZE = "memory size"  # int, bytes
    LIST = "list"  # tuple[str, ...]


def _units(spec: Mapping[int, str]) -> dict[str, int]:
    return {name: size for size, names in spec.items() for name in names.split()}


# Flink's TimeUtils and MemorySize spellings; a bare number is milliseconds or bytes, as in Flink.
_MS_PER = {"d": 86_400_000, "h": 3_600_000, "min": 60_000, "s": 1000, "ms": 1}
_DURATION_UNITS = _units({
    1: "ms milli millis millisecond milliseconds", 1000: "s sec secs second seconds",
    60_000: "m min mins minute minutes", 3_600_000: "h hour hours", 86_400_000: "d day days"})
_BYTES_PER = {"tb": 1 << 40, "gb": 1 << 30, "mb": 1 << 20, "kb": 1 << 10, "b": 1}
_MEMORY_UNITS = _units({
    1: "b bytes", 1 << 10: "k kb kibibytes", 1 << 20: "m mb mebibytes",
    1 << 30: "g gb gibibytes", 1 << 40: "t tb tebibytes"})
_NUMBER_WITH_UNIT = re.compile(r"\s*(\d+)\s*([a-zA-Z]*)\s*")


def _scaled(value: object, units: Mapping[str, int], what: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    match = _NUMBER_WITH_UNIT.fullmatch(value) if isinstance(value, str) else None
    unit = match.group(2).lower() if match else None
    if match is None or unit not in units and unit != "":
        raise ValueError(f"not a {what}: {value!r}")
    return int(match.group(1)) * (units[unit] if unit else 1)


def parse_duration(value: object) -> int:
    """Milliseconds of "10 s", "10s", "500 ms", "1 min", "2 h", "1 d", a bare integer
    (milliseconds) or a :class:`~datetime.timedelta`."""
    if isinstance(value, timedelta):
        return value // timedelta(milliseconds=1)
    return _scaled(value, _DURATION_UNITS, "duration")


def parse_memory_size(value: object) -> int:
    """Bytes of "32 kb", "32k", "64 mb", "1 gb" or a bare integer (bytes); 1 kb = 1024 bytes."""
    return _scaled(value, _MEMORY_UNITS, "memory size")


def _largest_unit(amount: int, per: Mapping[str, int]) -> str:
    unit = next((u for u, size in per.items() if amount and amount % size == 0), list(per)[-1])
    return f"{amount // per[unit]} {unit}"


def format_duration(millis: int) -> str:
    """The largest exact unit: 10000 -> "10 s", 1500 -> "1500 ms"."""
    return _largest_unit(millis, _MS_PER)


def format_memory_size(size: int) -> str:
    """The largest exact unit: 32768 -> "32 kb"."""
    return _largest_unit(size, _BYTES_PER)


def _text(value: object) -> str:
    if isinstance(value, bool):  # YAML reads `true` as True; Flink and Spark want "true"
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise ValueError(f"not a scalar: {value!r}")


def _parse_int(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        return int(value)
    raise ValueError(value)


def _parse_float(value: object) -> float:
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        return float(value)
    raise ValueError(value)


def _parse_bool(value: object) -> bool:
    text = value.strip().lower() if isinstance(value, str) else value
    if text in ("true", "false"):
        return text == "true"
    if isinstance(value, bool):
        return value
    raise ValueError(value)


def _parse_list(value: object) -> tuple[str, ...]:
    if isinstance(value, Mapping):  # millstream.spark.conf: {spark.ui.enabled: false}
        return tuple(f"{key}={_text(item)}" for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_text(item) for item in value)
    if isinstance(value, str):  # Flink's list syntax "a;b;c"
        return tuple(part.strip() for part in value.split(";") if part.strip())
    raise ValueError(value)


_PARSERS: dict[OptionType, Callable[[object], Any]] = {
    OptionType.INT: _parse_int, OptionType.FLOAT: _parse_float, OptionType.BOOL: _parse_bool,
    OptionType.STRING: _text, OptionType.DURATION: parse_duration,
    OptionType.MEMORY_SIZE: parse_memory_size, OptionType.LIST: _parse_list,
}


def _squash(text: str) -> str:
    """Spelling-blind form of a choice: "fixeddelay", "Fixed-Delay" and "FIXED_DELAY" agree."""
    return text.replace("-", "").replace("_", "").lower()


@dataclass(frozen=True)
class ConfigOption(Generic[T]):
    """One option: key, value type, default and documentation.

    ``fallback_keys`` are other spellings read silently (such as Flink 2's name of a Flink 1 key);
    ``deprecated_keys`` are read with a warning. ``choices`` restrict a string option: a value
    matches ignoring case, dashes and underscores and is stored in the declared spelling.
    """

    key: str
    type: OptionType
    default: T
    description: str
    fallback_keys: tuple[str, ...] = ()
    deprecated_keys: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()

    def parse(self, value: object) -> T:
        """A YAML, environment or command-line value (or an already typed one) as ``T``."""
        try:
            parsed = _PARSERS[self.type](value)
            if self.choices:
                parsed = next(c for c in self.choices if _squash(c) == _squash(parsed))
        except (ValueError, TypeError, StopIteration):
            message = f"{self.key}: expected {self._expected()}, got {value!r}"
            raise ConfigurationError(message) from None
        return cast(T, parsed)

    def format(self, value: Any) -> str:
        """Text that :meth:`parse` reads back as ``value``: "10 s", "32 kb", "a;b", "true"."""
        if value is None:
            return ""
        if self.type is OptionType.DURATION:
            return format_duration(value)
        if self.type is OptionType.MEMORY_SIZE:
            return format_memory_size(value)
        return ";".join(value) if self.type is OptionType.LIST else _text(value)

    def _expected(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        example = self.format(self.default) if self.default else ""
        return {
            OptionType.INT: "an integer", OptionType.FLOAT: "a number",
            OptionType.BOOL: "true or false", OptionType.STRING: "a string",
            OptionType.DURATION: f"a duration like '{example or '10 s'}' or milliseconds",
            OptionType.MEMORY_SIZE: f"a memory size like '{example or '32 kb'}' or bytes",
            OptionType.LIST: "a list, a mapping or 'a;b;c'",
        }[self.type]


_REGISTRY: dict[str, ConfigOption[Any]] = {}
_ALIASES: dict[str, ConfigOption[Any]] = {}  # fallback and deprecated keys -> their option


def _option(key: str, type_: OptionType, default: Any, description: str,
            fallback_keys: tuple[str, ...] = (), deprecated_keys: tuple[str, ...] = (),
            choices: tuple[str, ...] = ()) -> ConfigOption[Any]:
    option = ConfigOption(key, type_, default, description, fallback_keys, deprecated_keys, choices)
    for name in (key, *fallback_keys, *deprecated_keys):
        if name in _REGISTRY or name in _ALIASES:
            raise ValueError(f"configuration key {name!r} is declared twice")
    if default is not None and option.parse(default) != default:
        raise ValueError(f"{key}: default {default!r} is not a canonical {type_.value}")
    _REGISTRY[key] = option
    _ALIASES.update(dict.fromkeys((*fallback_keys, *deprecated_keys), option))
    return option


_INT, _FLOAT, _BOOL, _STR = OptionType.INT, OptionType.FLOAT, OptionType.BOOL, OptionType.STRING
_DURATION, _MEMORY, _LIST = OptionType.DURATION, OptionType.MEMORY_SIZE, OptionType.LIST
_S, _MIN, _H, _KB, _MB = 1000, 60_000, 3_600_000, 1 << 10, 1 << 20

# The registry. Keys and defaults are Flink's where Flink has the option; `millstream.*` are ours.
# Every option here is read by the code (tests/unit/test_config_usage.py checks it): an option for
# a feature that does not exist yet (a web UI, metrics reporters) is registered
# together with its implementation, not before.
# ---- JobManager: Dispatcher, JobMasters, BlobServer ------------------------------------------
JOBMANAGER_RPC_ADDRESS: ConfigOption[str] = _option(
    "jobmanager.rpc.address", _STR, "localhost",
    "Host of the JobManager's gRPC endpoint, used by TaskManagers and clients.")
JOBMANAGER_RPC_PORT: ConfigOption[int] = _option(
    "jobmanager.rpc.port", _INT, 6123,
    "Port of the JobManager's gRPC endpoint (0: a free port); the JobManager fails to start if "
    "it is taken.")
JOBMANAGER_BIND_HOST: ConfigOption[str | None] = _option(
    "jobmanager.bind-host", _STR, None,
    "Local address the JobManager listens on (0.0.0.0: every interface); unset: "
    "jobmanager.rpc.address.")
REST_PORT: ConfigOption[int] = _option(
    "rest.port", _INT, 8081,
    "Port of the JobManager's REST API (Flink's paths, JSON; 0: a free port, logged). A `millstream "
    "jobmanager` process serves it; when this key is not set and 8081 is taken it logs a warning and "
    "runs without REST. An in-process JobManager (embedded, MiniCluster) serves it only when set.")
REST_BIND_PORT: ConfigOption[str | None] = _option(
    "rest.bind-port", _STR, None,
    "Port(s) the REST API binds (Flink's key): a port, a range \"50100-50200\", or a list of both "
    "(\"50100,50102-50104\"); the JobManager takes the first free one, so JobManagers sharing a host "
    "each get their own. Unset: rest.port (`cluster start --ha` then gives its JobManagers the range "
    "rest.port to rest.port + 99).")
REST_BIND_ADDRESS: ConfigOption[str | None] = _option(
    "rest.bind-address", _STR, None,
    "Local address the REST API listens on; unset: the JobManager's bind host "
    "(jobmanager.bind-host, else jobmanager.rpc.address).")
REST_ALLOWED_HOSTS: ConfigOption[tuple[str, ...]] = _option(
    "rest.allowed-hosts", _LIST, (),
    "Host names the REST API answers besides localhost, IP addresses, jobmanager.rpc.address, "
    "jobmanager.bind-host and rest.bind-address (DNS rebinding protection: a request naming another "
    "host in its Host header gets 421); '*' answers every name.")
REST_MAX_CONNECTIONS: ConfigOption[int] = _option(
    "rest.max-connections", _INT, 512,
    "Most connections the REST API keeps open at once; one more is answered 503 and closed.")
REST_HEADER_TIMEOUT: ConfigOption[int] = _option(
    "rest.header-timeout", _DURATION, 10 * _S,
    "How long a new REST connection (its TLS handshake included) may take to send its first request "
    "head before it is closed.")
REST_IDLE_TIMEOUT: ConfigOption[int] = _option(
    "rest.idle-timeout", _DURATION, 60 * _S,
    "How long a REST connection may stay idle between requests (keep-alive) before it is closed.")
WEB_EXCEPTION_HISTORY_SIZE: ConfigOption[int] = _option(
    "web.exception-history-size", _INT, 16,
    "Most failures (the root cause of each failed attempt: restarts and the final failure) the "
    "JobManager keeps per job for the REST API's /jobs/:jobid/exceptions history; older ones are "
    "dropped.")
WEB_RESCALE_HISTORY_SIZE: ConfigOption[int] = _option(
    "web.adaptive-scheduler.rescale-history.size", _INT, 0,
    "Adaptive scheduler: how many of a job's latest rescales Flink's /jobs/:jobid/rescales/* paths "
    "(and Flink's dashboard's Rescales tab) show; 0 (the default, as in Flink) or less: they answer "
    "404. Millstream's own /jobs/:jobid/rescale-events lists every rescale either way.")
WEB_REFRESH_INTERVAL: ConfigOption[int] = _option(
    "web.refresh-interval", _DURATION, 3 * _S,
    "How often the web UI's pages refresh; `GET /config` reports it as `refresh-interval` (ms), as "
    "Flink's dashboard reads it.")
REST_WEB_FLINK_DASHBOARD: ConfigOption[bool] = _option(
    "rest.web.flink-dashboard", _BOOL, False,
    "Serve Flink's own web dashboard at /flink/ beside Millstream's page, from the flink-dist jar of "
    "the apache-flink-libraries wheel (.venv/flink-tools, MILLSTREAM_FLINK_HOME or an installed pyflink); "
    "the JobManager does not start when it is on and no jar is found.")
JOBSTORE_EXPIRATION_TIME: ConfigOption[int] = _option(
    "jobstore.expiration-time", _INT, 3600,
    "Seconds (an integer, as in Flink) a finished job's summary stays listed by `millstream list` and "
    "`status`.")
JOBSTORE_MAX_CAPACITY: ConfigOption[int] = _option(
    "jobstore.max-capacity", _INT, 1000,
    "Most finished jobs whose summary (status, times, failure) the JobManager keeps; the oldest "
    "beyond it are forgotten before their expiration time (Flink's default is unbounded).")
COLLECT_BATCH_SIZE_MAX: ConfigOption[int] = _option(
    "collect-sink.batch-size.max", _MEMORY, 2 * _MB,
    "Most collected bytes execute_and_collect's client pulls from the JobManager per request "
    "(at least one batch).")
COLLECT_BUFFER_SIZE: ConfigOption[int] = _option(
    "millstream.collect.buffer-size", _MEMORY, 8 * _MB,
    "Collected bytes the JobManager buffers per job for execute_and_collect; when full, the collect "
    "sinks wait until the client has pulled (backpressure).")
BLOB_STORAGE_DIR: ConfigOption[str | None] = _option(
    "millstream.blob.storage-dir", _STR, None,
    "Directory of the BlobServer and of the TaskManagers' blob caches; unset: a temporary one.",
    fallback_keys=("blob.storage.directory",))

# ---- ResourceManager and slots ---------------------------------------------------------------
SLOT_REQUEST_TIMEOUT: ConfigOption[int] = _option(
    "slot.request.timeout", _DURATION, 300 * _S,
    "How long a JobMaster waits for the slots it declared before the job fails.")
JOBMANAGER_SCHEDULER: ConfigOption[str] = _option(
    "jobmanager.scheduler", _STR, "default",
    "default: a job declares the slots of its parallelism and waits for them (slot.request.timeout); "
    "adaptive (Flink's adaptive scheduler): a job runs with the slots there are and rescales from its "
    "latest checkpoint when slots come or go.",
    choices=("default", "adaptive"))
SCHEDULER_MODE: ConfigOption[str | None] = _option(
    "scheduler-mode", _STR, None,
    "reactive (Flink's reactive mode, implies jobmanager.scheduler adaptive): every job uses every "
    "slot of the cluster, each vertex up to its max parallelism, and waits for slots for ever; a lost "
    "TaskManager scales the job down without counting against its restart strategy.",
    choices=("reactive",))
ADAPTIVE_MIN_PARALLELISM_INCREASE: ConfigOption[int] = _option(
    "jobmanager.adaptive-scheduler.min-parallelism-increase", _INT, 1,
    "Adaptive scheduler: the least growth of some vertex's parallelism that makes a running job "
    "rescale up.")
ADAPTIVE_RESOURCE_STABILIZATION_TIMEOUT: ConfigOption[int] = _option(
    "jobmanager.adaptive-scheduler.resource-stabilization-timeout", _DURATION, 10 * _S,
    "Adaptive scheduler: how long the slots must stay unchanged before a job starts below its "
    "desired parallelism, or a running job rescales up; reactive mode's default is 0.")
ADAPTIVE_RESOURCE_WAIT_TIMEOUT: ConfigOption[int] = _option(
    "jobmanager.adaptive-scheduler.resource-wait-timeout", _DURATION, 5 * _MIN,
    "Adaptive scheduler: how long a job waits for its first slots (one per slot sharing group) "
    "before it fails (negative: for ever, reactive mode's default).")
RESOURCEMANAGER_TYPE: ConfigOption[str] = _option(
    "resourcemanager.type", _STR, "standalone",
    "How the ResourceManager gets TaskManagers: standalone (they are started by hand, by `cluster "
    "start` or by compose, and register themselves) or process (Flink's active ResourceManager: it "
    "starts local TaskManager processes of taskmanager.numberOfTaskSlots slots when jobs lack slots "
    "and stops them after resourcemanager.taskmanager-timeout idle) or docker (the same with "
    "containers of resourcemanager.docker.image, through the Docker engine's API).",
    choices=("standalone", "process", "docker"))
RESOURCEMANAGER_DOCKER_IMAGE: ConfigOption[str] = _option(
    "resourcemanager.docker.image", _STR, "millstream:latest",
    "resourcemanager.type docker: the image of the TaskManager containers (deploy/Dockerfile's); "
    "never pulled: a missing image is a failed start.")
RESOURCEMANAGER_DOCKER_NETWORK: ConfigOption[str | None] = _option(
    "resourcemanager.docker.network", _STR, None,
    "resourcemanager.type docker: the Docker network the TaskManager containers join, the "
    "JobManager's (docker compose: <project>_default); unset: the engine's default bridge.")
RESOURCEMANAGER_DOCKER_VOLUMES: ConfigOption[tuple[str, ...]] = _option(
    "resourcemanager.docker.volumes", _LIST, (),
    "resourcemanager.type docker: mounts of the TaskManager containers, 'source:target' (a named "
    "volume or a host path), e.g. 'checkpoints:/checkpoints;/srv/data:/data'.")
RESOURCEMANAGER_DOCKER_HOST: ConfigOption[str] = _option(
    "resourcemanager.docker.host", _STR, "unix:///var/run/docker.sock",
    "resourcemanager.type docker: the Docker engine's socket (mount it into the JobManager's "
    "container).")
RESOURCEMANAGER_TASKMANAGER_TIMEOUT: ConfigOption[int] = _option(
    "resourcemanager.taskmanager-timeout", _DURATION, 30 * _S,
    "resourcemanager.type process: how long a TaskManager it started may keep all its slots free "
    "before it is stopped.")
SLOTMANAGER_MAX_SLOTS: ConfigOption[int | None] = _option(
    "slotmanager.number-of-slots.max", _INT, None,
    "resourcemanager.type process: most slots the cluster may have (registered TaskManagers and "
    "those starting); no TaskManager is started beyond it. Unset: no limit.")
RESOURCEMANAGER_START_WORKER_RETRY_INTERVAL: ConfigOption[int] = _option(
    "resourcemanager.start-worker.retry-interval", _DURATION, 3 * _S,
    "resourcemanager.type process: the wait before starting TaskManagers again after one could not "
    "start (it failed or exited before registering); it doubles with each further failure, up to "
    "32 times this, and a registration resets it. The cause is logged once.")

# ---- Restart strategies (Flink's RestartStrategyOptions; the job's own setting wins) ---------
RESTART_STRATEGY_TYPE: ConfigOption[str | None] = _option(
    "restart-strategy.type", _STR, None,
    "Restart strategy of jobs that set none themselves: none (also off, disable), fixed-delay, "
    "failure-rate or exponential-delay; unset: exponential-delay with checkpointing, else none. "
    "A job restarts from the beginning (no checkpoints yet): sources start over, state is empty.",
    deprecated_keys=("restart-strategy",))
RESTART_FIXED_DELAY_ATTEMPTS: ConfigOption[int] = _option(
    "restart-strategy.fixed-delay.attempts", _INT, 1,
    "fixed-delay: restarts before the job fails.")
RESTART_FIXED_DELAY_DELAY: ConfigOption[int] = _option(
    "restart-strategy.fixed-delay.delay", _DURATION, 1 * _S,
    "fixed-delay: time between a failure and the restart.")
RESTART_FAILURE_RATE_MAX_FAILURES: ConfigOption[int] = _option(
    "restart-strategy.failure-rate.max-failures-per-interval", _INT, 1,
    "failure-rate: most failures within the interval before the job fails.")
RESTART_FAILURE_RATE_INTERVAL: ConfigOption[int] = _option(
    "restart-strategy.failure-rate.failure-rate-interval", _DURATION, 1 * _MIN,
    "failure-rate: the interval the failures are counted in.")
RESTART_FAILURE_RATE_DELAY: ConfigOption[int] = _option(
    "restart-strategy.failure-rate.delay", _DURATION, 1 * _S,
    "failure-rate: time between a failure and the restart.")
RESTART_EXP_INITIAL_BACKOFF: ConfigOption[int] = _option(
    "restart-strategy.exponential-delay.initial-backoff", _DURATION, 1 * _S,
    "exponential-delay: backoff before the first restart.")
RESTART_EXP_MAX_BACKOFF: ConfigOption[int] = _option(
    "restart-strategy.exponential-delay.max-backoff", _DURATION, 1 * _MIN,
    "exponential-delay: the highest backoff.")
RESTART_EXP_MULTIPLIER: ConfigOption[float] = _option(
    "restart-strategy.exponential-delay.backoff-multiplier", _FLOAT, 1.5,
    "exponential-delay: factor of each consecutive backoff.")
RESTART_EXP_RESET_THRESHOLD: ConfigOption[int] = _option(
    "restart-strategy.exponential-delay.reset-backoff-threshold", _DURATION, 1 * _H,
    "exponential-delay: a failure this long after the last restart resets backoff and count.")
RESTART_EXP_JITTER: ConfigOption[float] = _option(
    "restart-strategy.exponential-delay.jitter-factor", _FLOAT, 0.1,
    "exponential-delay: random share of the backoff added or taken away.")
RESTART_EXP_ATTEMPTS: ConfigOption[int] = _option(
    "restart-strategy.exponential-delay.attempts-before-reset-backoff", _INT, 2**31 - 1,
    "exponential-delay: consecutive restarts before the job fails (default: unlimited).")

# ---- Checkpointing (Flink's CheckpointingOptions; the job's own setting wins) -----------------
CHECKPOINTING_INTERVAL: ConfigOption[int | None] = _option(
    "execution.checkpointing.interval", _DURATION, None,
    "Checkpoint interval of jobs that do not call enable_checkpointing themselves; unset: no "
    "checkpoints.")
CHECKPOINTING_MODE: ConfigOption[str] = _option(
    "execution.checkpointing.mode", _STR, "EXACTLY_ONCE",
    "EXACTLY_ONCE (tasks with several inputs align barriers) or AT_LEAST_ONCE (no alignment).",
    choices=("EXACTLY_ONCE", "AT_LEAST_ONCE"))
CHECKPOINTING_TIMEOUT: ConfigOption[int] = _option(
    "execution.checkpointing.timeout", _DURATION, 10 * _MIN,
    "A checkpoint not completed within this time is aborted (CHECKPOINT_EXPIRED).")
CHECKPOINTING_MIN_PAUSE: ConfigOption[int] = _option(
    "execution.checkpointing.min-pause", _DURATION, 0,
    "Least time between the end of one checkpoint and the start of the next.")
CHECKPOINTING_MAX_CONCURRENT: ConfigOption[int] = _option(
    "execution.checkpointing.max-concurrent-checkpoints", _INT, 1,
    "Most checkpoints in flight at once (CheckpointConfig.get_max_concurrent_checkpoints). An upper "
    "bound: the coordinator takes one at a time, whatever the value.")
CHECKPOINTING_UNALIGNED: ConfigOption[bool] = _option(
    "execution.checkpointing.unaligned.enabled", _BOOL, False,
    "Unaligned checkpoints requested (CheckpointConfig.is_unaligned_checkpoints_enabled); "
    "checkpoints are taken aligned (exactly once) whatever the value, and the JobManager logs a "
    "WARNING when it accepts a job that asks for them.",
    fallback_keys=("execution.checkpointing.unaligned",))
CHECKPOINTING_TOLERABLE_FAILURES: ConfigOption[int] = _option(
    "execution.checkpointing.tolerable-failed-checkpoints", _INT, 0,
    "Consecutive failed checkpoints (expired, declined, I/O) a job tolerates; one more fails it.")
CHECKPOINTING_DIR: ConfigOption[str | None] = _option(
    "execution.checkpointing.dir", _STR, None,
    "Directory (absolute path or file:// URI) that every TaskManager and the JobManager share: "
    "checkpoints are written as <dir>/<job id>/chk-<n>; unset: <system temp dir>/millstream-"
    "checkpoints, which only works when the whole cluster runs on one machine.",
    fallback_keys=("state.checkpoints.dir",))
CHECKPOINTING_NUM_RETAINED: ConfigOption[int] = _option(
    "execution.checkpointing.num-retained", _INT, 1,
    "Completed checkpoints kept per job; older ones are deleted.",
    fallback_keys=("state.checkpoints.num-retained",))

CHECKPOINTING_EXTERNALIZED_RETENTION: ConfigOption[str] = _option(
    "execution.checkpointing.externalized-checkpoint-retention", _STR, "NO_EXTERNALIZED_CHECKPOINTS",
    "What becomes of a job's checkpoints when it ends, as in Flink 2: NO_EXTERNALIZED_CHECKPOINTS "
    "(the default: deleted however the job ends), DELETE_ON_CANCELLATION (kept only when the job "
    "fails) or RETAIN_ON_CANCELLATION (kept when it fails or is cancelled). A finished job's are "
    "deleted in every mode.",
    choices=("DELETE_ON_CANCELLATION", "RETAIN_ON_CANCELLATION", "NO_EXTERNALIZED_CHECKPOINTS"))

STATE_BACKEND_TYPE: ConfigOption[str] = _option(
    "state.backend.type", _STR, "hashmap",
    "The keyed state backend (Flink's key; `env.set_state_backend`): `hashmap`, keyed state as objects "
    "on the heap of the task's Spark worker, or `rocksdb`, keyed state in an embedded RocksDB per task "
    "under `state.backend.rocksdb.localdir` (EmbeddedRocksDBStateBackend); another value is refused "
    "when the job is built or the JobManager starts.",
    choices=("hashmap", "rocksdb"))
STATE_BACKEND_ROCKSDB_LOCALDIR: ConfigOption[str | None] = _option(
    "state.backend.rocksdb.localdir", _STR, None,
    "Directory under which each task of a `rocksdb` job keeps its RocksDB instance (deleted when the "
    "task ends); default: the task's working directory on its Spark worker.")
STATE_BACKEND_ROCKSDB_TIMER_SERVICE: ConfigOption[str] = _option(
    "state.backend.rocksdb.timer-service.factory", _STR, "ROCKSDB",
    "Where a `rocksdb` job keeps its timers: ROCKSDB (in RocksDB, only the earliest timer of each key "
    "group in memory) or HEAP (in the task's memory, as the hashmap backend does).",
    choices=("ROCKSDB", "HEAP"))
STATE_BACKEND_ROCKSDB_MEMORY_MANAGED: ConfigOption[bool] = _option(
    "state.backend.rocksdb.memory.managed", _BOOL, True,
    "Bound each task's RocksDB memory: one block cache and one write-buffer budget of "
    "`state.backend.rocksdb.memory.fixed-per-slot` shared by all its column families (false: "
    "RocksDB's own per-column-family defaults, unbounded in the number of states).")
STATE_BACKEND_ROCKSDB_MEMORY_FIXED_PER_SLOT: ConfigOption[int] = _option(
    "state.backend.rocksdb.memory.fixed-per-slot", _MEMORY, 64 * _MB,
    "The memory budget of one task's RocksDB (block cache plus write buffers) when "
    "`state.backend.rocksdb.memory.managed` is true.")
STATE_BACKEND_ROCKSDB_WRITE_BUFFER_RATIO: ConfigOption[float] = _option(
    "state.backend.rocksdb.memory.write-buffer-ratio", _FLOAT, 0.5,
    "The share of the RocksDB memory budget that write buffers (memtables) may use.")

STATE_BACKEND_ROCKSDB_PREDEFINED_OPTIONS: ConfigOption[str] = _option(
    "state.backend.rocksdb.predefined-options", _STR, "DEFAULT",
    "A profile of RocksDB options (`EmbeddedRocksDBStateBackend.set_predefined_options`): DEFAULT, "
    "SPINNING_DISK_OPTIMIZED, SPINNING_DISK_OPTIMIZED_HIGH_MEM or FLASH_SSD_OPTIMIZED, Flink's settings "
    "each; with `memory.managed` the shared block cache replaces the profile's own.",
    choices=("DEFAULT", "SPINNING_DISK_OPTIMIZED", "SPINNING_DISK_OPTIMIZED_HIGH_MEM", "FLASH_SSD_OPTIMIZED"))
STATE_BACKEND_ROCKSDB_OPTIONS_FACTORY: ConfigOption[str | None] = _option(
    "state.backend.rocksdb.options-factory", _STR, None,
    "The fully-qualified name (`package.module.Class`) of a `RocksDBOptionsFactory` "
    "(`EmbeddedRocksDBStateBackend.set_options`), importable on the workers: its "
    "`create_db_options`/`create_column_options` change the rocksdict Options each task's RocksDB "
    "opens with, after the predefined profile.")

CHECKPOINTING_INCREMENTAL: ConfigOption[bool] = _option(
    "execution.checkpointing.incremental", _BOOL, False,
    "Incremental checkpoints of the `rocksdb` state backend (`EmbeddedRocksDBStateBackend("
    "enable_incremental_checkpointing=True)`): a checkpoint uploads only the RocksDB files new since "
    "the last completed one, into the job's `shared/` checkpoint directory, and references the rest; "
    "a shared file is deleted once no retained checkpoint references it. Savepoints stay in the "
    "canonical format; the `hashmap` backend always writes full checkpoints.",
    fallback_keys=("state.backend.incremental",))
CHECKPOINTING_SAVEPOINT_DIR: ConfigOption[str | None] = _option(
    "execution.checkpointing.savepoint-dir", _STR, None,
    "Default target directory of savepoints (`millstream savepoint JOB` without a directory).",
    fallback_keys=("state.savepoints.dir",))
SAVEPOINT_PATH: ConfigOption[str | None] = _option(
    "execution.savepoint.path", _STR, None,
    "A savepoint (or retained checkpoint) directory a submitted job resumes from "
    "(`millstream run -s PATH`).")
SAVEPOINT_IGNORE_UNCLAIMED_STATE: ConfigOption[bool] = _option(
    "execution.savepoint.ignore-unclaimed-state", _BOOL, False,
    "Resume even if the savepoint holds state of operators the job no longer has "
    "(`--allow-non-restored-state`).")

# ---- TaskManager: slots, server, network -----------------------------------------------------
TASKMANAGER_NUM_TASK_SLOTS: ConfigOption[int] = _option(
    "taskmanager.numberOfTaskSlots", _INT, 1,
    "Slots a TaskManager offers (at least 1); each runs one parallel pipeline of a job.")
TASKMANAGER_RESOURCE_ID: ConfigOption[str | None] = _option(
    "taskmanager.resource-id", _STR, None,
    "The TaskManager's resource id, as the JobManager and the web UI name it; unset: a random "
    "taskmanager-<12 hex>. A resourcemanager.type process ResourceManager names the TaskManagers it "
    "starts with it.")
TASKMANAGER_HOST: ConfigOption[str | None] = _option(
    "taskmanager.host", _STR, None,
    "Address a TaskManager advertises to the JobManager, the other TaskManagers and its Spark "
    "executors (with the embedded Spark its tasks serve their partitions on it too); unset: "
    "127.0.0.1 with the embedded Spark (a cluster on one machine), with an external "
    "millstream.spark.master this machine's address on the route to the master's host.")
TASKMANAGER_BIND_HOST: ConfigOption[str | None] = _option(
    "taskmanager.bind-host", _STR, None,
    "Address the TaskManager's gRPC server, its Spark driver and the control channel of its tasks "
    "listen on; unset: taskmanager.host with the embedded Spark, 0.0.0.0 (every interface) with "
    "an external millstream.spark.master.")
TASKMANAGER_RPC_PORT: ConfigOption[int] = _option(
    "taskmanager.rpc.port", _INT, 0,
    "Port of the TaskManager's gRPC endpoint (0: a free port); the TaskManager fails to start if "
    "it is taken.")
TASK_CANCELLATION_TIMEOUT: ConfigOption[int] = _option(
    "task.cancellation.timeout", _DURATION, 180 * _S,
    "How long a TaskManager that leaves a JobManager leader (a new one was elected, or none leads) "
    "waits for the old leader's tasks to stop before it registers with the new one; tasks still "
    "running then are a fatal error: the TaskManager exits (Flink's task cancellation watchdog).")
NETWORK_BUFFERS_PER_CHANNEL: ConfigOption[int] = _option(
    "taskmanager.network.memory.buffers-per-channel", _INT, 4,
    "Credits a consumer task grants each input channel: buffers a producer may send ahead of the "
    "consumer (Flink's default is 2; 4 measured faster here). At least 1.")
NETWORK_MAX_BUFFERS_PER_CHANNEL: ConfigOption[int] = _option(
    "taskmanager.network.memory.max-buffers-per-channel", _INT, 4,
    "Buffers a producer task queues per subpartition before it blocks (backpressure); "
    "Flink's default is 10. At least 1.")

# ---- Metrics ---------------------------------------------------------------------------------
METRICS_TASK_IO_TIMING: ConfigOption[bool] = _option(
    "metrics.task.io-timing", _BOOL, True,
    "Whether tasks time their waits for input and for output credit, to report Flink's "
    "busyTimeMsPerSecond, idleTimeMsPerSecond and backPressuredTimeMsPerSecond (and the REST "
    "backpressure figures). Off: two clock reads fewer per input buffer, those metrics are not "
    "reported; record and byte counts are.")
METRICS_PROMETHEUS_PORT: ConfigOption[str | None] = _option(
    "metrics.reporter.prom.port", _STR, None,
    "Serve Prometheus metrics at http://<host>:<port>/metrics from every JobManager and TaskManager "
    "process: a port, or a range such as 9249-9260 of which each process takes the first free one "
    "(and logs which). Unset: no reporter.")

# ---- Heartbeats: JobMaster <-> TaskManager, ResourceManager <-> TaskManager ------------------
HEARTBEAT_INTERVAL: ConfigOption[int] = _option(
    "heartbeat.interval", _DURATION, 10 * _S, "Time between two heartbeat requests.")
HEARTBEAT_TIMEOUT: ConfigOption[int] = _option(
    "heartbeat.timeout", _DURATION, 50 * _S,
    "Time without a heartbeat after which the peer is considered lost.")

# ---- Execution: read by the client's StreamExecutionEnvironment ------------------------------
DEFAULT_PARALLELISM: ConfigOption[int] = _option(
    "parallelism.default", _INT, 1,
    "Parallelism of operators that set none. Unset, a local (embedded) environment uses every CPU core "
    "and a job submitted to a cluster uses 1, as Flink's.")
MAX_PARALLELISM: ConfigOption[int] = _option(
    "pipeline.max-parallelism", _INT, -1,
    "Number of key groups, the upper bound for rescaling; -1 derives it from the parallelism.")
RUNTIME_MODE: ConfigOption[str] = _option(
    "execution.runtime-mode", _STR, "STREAMING", "Execution mode of jobs.",
    choices=("STREAMING", "BATCH", "AUTOMATIC"))
OPERATOR_CHAINING: ConfigOption[bool] = _option(
    "pipeline.operator-chaining.enabled", _BOOL, True,
    "Whether chainable operators are fused into one task (see the JobGraph chaining rules).",
    deprecated_keys=("pipeline.operator-chaining",))
BUFFER_TIMEOUT: ConfigOption[int] = _option(
    "execution.buffer-timeout", _DURATION, 100,
    "Longest time a partly filled output buffer waits before it is sent; 0: after every record.",
    fallback_keys=("execution.buffer-timeout.interval",))
AUTO_WATERMARK_INTERVAL: ConfigOption[int] = _option(
    "pipeline.auto-watermark-interval", _DURATION, 200,
    "How often timestamp assigners emit periodic watermarks; 0 disables periodic watermarks.")

# ---- Table API: Python functions (millstream/table/vectorized.py, async_calc.py) -----------------
ARROW_BATCH_SIZE: ConfigOption[int] = _option(
    "python.fn-execution.arrow.batch.size", _INT, 1000,
    "Most rows a pandas (vectorized) scalar function receives in one call (one Series per argument).")
VECTORIZED_CALC_ENABLED: ConfigOption[bool] = _option(
    "table.exec.millstream.vectorized-calc.enabled", _BOOL, True,
    "Whether a Calc (SQL projection and filter) computes the expressions pyarrow.compute evaluates exactly "
    "over Arrow arrays, a batch of rows at a time (millstream/table/arrow_calc.py); false: row by row. "
    "Millstream's own option: Flink's Calc is generated Java code.")
VECTORIZED_AGG_ENABLED: ConfigOption[bool] = _option(
    "table.exec.millstream.vectorized-agg.enabled", _BOOL, False,
    "Whether a GROUP BY of built-in aggregates over insert-only input runs in two phases, the local one "
    "folding each batch of rows per key over Arrow arrays (millstream/table/arrow_agg.py); in streaming "
    "mode only with table.exec.mini-batch.enabled. Off by default: it paid with few keys and lost with many "
    "(bench/sql_agg.py). false: row by row after the keyed exchange. Millstream's own option.")
MINI_BATCH_ENABLED: ConfigOption[bool] = _option(
    "table.exec.mini-batch.enabled", _BOOL, False,
    "Whether a streaming GROUP BY may fold a batch of input rows per key before emitting, so it emits fewer "
    "intermediate -U/+U updates (Flink's mini-batch; Millstream's batch is the slice a task receives).")
AGG_PHASE_STRATEGY: ConfigOption[str] = _option(
    "table.optimizer.agg-phase-strategy", _STR, "AUTO",
    "ONE_PHASE: a GROUP BY aggregates after the keyed exchange only; AUTO and TWO_PHASE allow the local "
    "pre-aggregation before it (where table.exec.millstream.vectorized-agg.enabled applies).",
    choices=("AUTO", "ONE_PHASE", "TWO_PHASE"))
SINK_NOT_NULL_ENFORCER: ConfigOption[str] = _option(
    "table.exec.sink.not-null-enforcer", _STR, "ERROR",
    "What an INSERT does with a NULL in a sink column declared NOT NULL: ERROR fails the job naming the "
    "column, DROP drops the row silently (Flink's option).", choices=("ERROR", "DROP"))
ASYNC_SCALAR_MAX_CONCURRENT_OPERATIONS: ConfigOption[int] = _option(
    "table.exec.async-scalar.max-concurrent-operations", _INT, 10,
    "Most calls of async scalar functions in flight per task; a full task holds its input back.",
    deprecated_keys=("table.exec.async-scalar.buffer-capacity",))
ASYNC_SCALAR_TIMEOUT: ConfigOption[int] = _option(
    "table.exec.async-scalar.timeout", _DURATION, 180_000,
    "How long one row's async scalar function call may take, retries included, before the job fails.")
ASYNC_SCALAR_RETRY_STRATEGY: ConfigOption[str] = _option(
    "table.exec.async-scalar.retry-strategy", _STR, "FIXED_DELAY",
    "What an async scalar function call that raised does: FIXED_DELAY calls again after retry-delay, "
    "up to max-attempts; NO_RETRY fails the job.", choices=("FIXED_DELAY", "NO_RETRY"))
ASYNC_SCALAR_RETRY_DELAY: ConfigOption[int] = _option(
    "table.exec.async-scalar.retry-delay", _DURATION, 100,
    "The wait before an async scalar function call is made again (FIXED_DELAY).")
ASYNC_SCALAR_MAX_ATTEMPTS: ConfigOption[int] = _option(
    "table.exec.async-scalar.max-attempts", _INT, 3,
    "Most retries of one async scalar function call (FIXED_DELAY) before the job fails.")

# ---- High availability (Flink's HighAvailabilityOptions; runtime/ha/) -------------------------
HA_TYPE: ConfigOption[str] = _option(
    "high-availability.type", _STR, "NONE",
    "NONE: one JobManager at a fixed address (jobmanager.rpc.address), nothing survives it; "
    "ZOOKEEPER: JobManagers elect a leader in ZooKeeper and keep job graphs, job results and "
    "checkpoint pointers in high-availability.storageDir, so a standby takes over the jobs.",
    deprecated_keys=("high-availability", "recovery.mode"), choices=("NONE", "ZOOKEEPER"))
HA_CLUSTER_ID: ConfigOption[str] = _option(
    "high-availability.cluster-id", _STR, "/default",
    "Separates the HA data of clusters that share a ZooKeeper and a storage directory: "
    "ZooKeeper nodes live under <path.root>/<cluster-id>, files under <storageDir>/<cluster-id>.",
    deprecated_keys=("high-availability.zookeeper.path.namespace",))
HA_STORAGE_DIR: ConfigOption[str | None] = _option(
    "high-availability.storageDir", _STR, None,
    "Directory (absolute path or file:// URI) every JobManager shares, where job graphs and job "
    "results are written; ZooKeeper holds only pointers to them. Required with ZOOKEEPER.",
    deprecated_keys=("high-availability.zookeeper.storageDir",))
HA_ZOOKEEPER_QUORUM: ConfigOption[str | None] = _option(
    "high-availability.zookeeper.quorum", _STR, None,
    "ZooKeeper servers as host:port[,host:port...]. Required with ZOOKEEPER.")
HA_ZOOKEEPER_ROOT: ConfigOption[str] = _option(
    "high-availability.zookeeper.path.root", _STR, "/millstream",
    "ZooKeeper node under which every Millstream cluster keeps its entries (Flink's is /flink).")
HA_ZOOKEEPER_SESSION_TIMEOUT: ConfigOption[int] = _option(
    "high-availability.zookeeper.client.session-timeout", _DURATION, 60 * _S,
    "ZooKeeper session timeout: a JobManager that cannot reach ZooKeeper this long loses its "
    "session, its leadership and its locks, and a standby takes over.")
HA_ZOOKEEPER_CONNECTION_TIMEOUT: ConfigOption[int] = _option(
    "high-availability.zookeeper.client.connection-timeout", _DURATION, 15 * _S,
    "How long a process waits for its first ZooKeeper connection before it fails to start.")
HA_ZOOKEEPER_RETRY_WAIT: ConfigOption[int] = _option(
    "high-availability.zookeeper.client.retry-wait", _DURATION, 5 * _S,
    "Pause before the first retry of a ZooKeeper operation cut by a connection loss (doubling).")
HA_ZOOKEEPER_MAX_RETRY_ATTEMPTS: ConfigOption[int] = _option(
    "high-availability.zookeeper.client.max-retry-attempts", _INT, 3,
    "Retries of a ZooKeeper operation cut by a connection loss before it fails.")
HA_ZOOKEEPER_TOLERATE_SUSPENDED: ConfigOption[bool] = _option(
    "high-availability.zookeeper.client.tolerate-suspended-connections", _BOOL, False,
    "false: a leader whose ZooKeeper connection is suspended (server unreachable, session maybe "
    "alive) gives up leadership at once, and listeners forget the leader; true: only a lost "
    "session does that, or a connection suspended for a whole session timeout.")

# ---- Millstream: Spark, RPC, client ----------------------------------------------------------
SPARK_MASTER: ConfigOption[str] = _option(
    "millstream.spark.master", _STR, "",
    "Spark master URL for TaskManagers' Spark sessions; empty: an embedded local[N], N the Spark "
    "tasks a TaskManager runs at once: slots (millstream.spark.task-placement=slot, the default) or "
    "local[slots x millstream.spark.tasks-per-slot] (task). An external master (spark://HOST:7077) "
    "runs every slot's (or task's) Spark task in an executor of that cluster, holding one core for "
    "its life; a TaskManager asks for N cores (spark.cores.max), never more.")
SPARK_TASKS_PER_SLOT: ConfigOption[int] = _option(
    "millstream.spark.tasks-per-slot", _INT, 8,
    "With millstream.spark.task-placement=task: tasks one slot may run at once (slot sharing puts "
    "one task per vertex of a group in a slot); the embedded Spark is local[slots x this] so that "
    "every deployed task holds a core, and a TaskManager refuses tasks beyond slots x this. Unused "
    "with the default placement slot (a slot's subtasks share one Spark task: local[slots]).")
SPARK_TASK_PLACEMENT: ConfigOption[str] = _option(
    "millstream.spark.task-placement", _STR, "slot",
    "How a TaskManager's subtasks hold Spark cores. slot: all subtasks deployed into one slot (one "
    "per vertex of its slot sharing group) run as threads of one Spark task and one Python worker, "
    "so a slot costs one core (Spark cores: slots). task: every subtask (operator chain) is a "
    "Spark task of its own, holding a core for its life (Spark cores: slots x "
    "millstream.spark.tasks-per-slot). A TaskManager asks Spark for no more cores than that.",
    choices=("task", "slot"))
SPARK_CONTROL_PORT: ConfigOption[str] = _option(
    "millstream.spark.control.port", _STR, "0",
    "Port, or range like 50100-50200, of the channel a TaskManager's tasks in Spark executors "
    "connect back to (it carries the task, its events and cancellation); 0: any free port. With "
    "an external Spark cluster the workers must reach it at taskmanager.host.")
SPARK_EXECUTOR_WAIT: ConfigOption[int] = _option(
    "millstream.spark.executor-wait", _DURATION, 60 * _S,
    "With an external millstream.spark.master: how long a starting TaskManager waits for executors "
    "with a free core; it offers as many slots as Spark gives cores (at most its own), and none "
    "within this time fails its start, naming the master.")
SPARK_CONF: ConfigOption[tuple[str, ...]] = _option(
    "millstream.spark.conf", _LIST, (),
    "Extra Spark properties: a YAML mapping, a list of key=value, or 'k1=v1;k2=v2'.")
RPC_TIMEOUT: ConfigOption[int] = _option(
    "millstream.rpc.timeout", _DURATION, 10 * _S, "Deadline of every gRPC call.")
RPC_MAX_MESSAGE_SIZE: ConfigOption[int] = _option(
    "millstream.rpc.max-message-size", _MEMORY, 64 * _MB, "Largest gRPC message sent or received.")
RPC_MAX_CONNECTIONS: ConfigOption[int] = _option(
    "millstream.rpc.max-connections", _INT, 1024,
    "Most connections a gRPC server (JobManager, TaskManager) accepts at once; more are closed at once.")
RPC_HANDSHAKE_TIMEOUT: ConfigOption[int] = _option(
    "millstream.rpc.handshake-timeout", _DURATION, 10 * _S,
    "How long a new gRPC connection may take to complete its (TLS and HTTP/2) handshake before it "
    "is closed: a peer that connects and sends nothing holds a descriptor this long at most.")
RPC_MAX_CONNECTION_IDLE: ConfigOption[int] = _option(
    "millstream.rpc.max-connection-idle", _DURATION, 5 * _MIN,
    "A gRPC server closes a connection that carried no call for this long (clients reconnect when "
    "they call again).")
CLIENT_SUBMISSION_TIMEOUT: ConfigOption[int] = _option(
    "millstream.client.submission-timeout", _DURATION, 60 * _S,
    "How long the client keeps trying to submit a job while the JobManager is unreachable "
    "before it gives up.",
    fallback_keys=("client.timeout",))


# ---- Security: TLS and tokens (runtime/rpc/tls.py, runtime/rpc/auth.py; README, Security) -------------
SSL_ENABLED: ConfigOption[bool] = _option(
    "security.ssl.enabled", _BOOL, False,
    "Mutual TLS on every connection of the cluster: every gRPC server (JobManager, TaskManagers) "
    "and channel (clients and the CLI too), the data plane between tasks and the control channel "
    "between a TaskManager and its Spark workers. Every process, clients included, then needs "
    "security.ssl.key, security.ssl.cert and security.ssl.truststore.",
    fallback_keys=("security.ssl.internal.enabled",))
SSL_KEY: ConfigOption[str | None] = _option(
    "security.ssl.key", _STR, None,
    "Path of this process's private key, PEM (unencrypted PKCS#8 or traditional).")
SSL_CERT: ConfigOption[str | None] = _option(
    "security.ssl.cert", _STR, None,
    "Path of this process's certificate chain, PEM, leaf first; its subject alternative names must "
    "include every host name or IP address peers dial it at (jobmanager.rpc.address, "
    "taskmanager.host).")
SSL_TRUSTSTORE: ConfigOption[str | None] = _option(
    "security.ssl.truststore", _STR, None,
    "Path of the CA certificates (PEM) that peers' certificates must be signed by.")
AUTH_CLIENT_TOKEN: ConfigOption[str | None] = _option(
    "security.auth.client-token", _STR, None,
    "Shared secret of clients (CLI, env.execute()): the only token the Dispatcher (submit, list, "
    "cancel, status, savepoint) accepts. Setting it or the cluster token turns token "
    "authentication on; a JobManager then needs both, and they must differ.")
AUTH_CLIENT_TOKEN_FILE: ConfigOption[str | None] = _option(
    "security.auth.client-token-file", _STR, None,
    "A file holding the client token (surrounding whitespace ignored); used when "
    "security.auth.client-token is not set.")
AUTH_CLUSTER_TOKEN: ConfigOption[str | None] = _option(
    "security.auth.cluster-token", _STR, None,
    "Shared secret of the cluster's processes (JobManagers, TaskManagers, their Spark workers): the "
    "only token the ResourceManager, JobMaster, BlobServer and TaskExecutor services accept.")
AUTH_CLUSTER_TOKEN_FILE: ConfigOption[str | None] = _option(
    "security.auth.cluster-token-file", _STR, None,
    "A file holding the cluster token (surrounding whitespace ignored); used when "
    "security.auth.cluster-token is not set.")


# ---- Logs: process log files, task output (runtime/entrypoint/log_files.py, taskmanager/task_output.py) --
LOG_DIR: ConfigOption[str | None] = _option(
    "env.log.dir", _STR, None,
    "Directory of the JobManager's and TaskManagers' log files (millstream-<role>-<index>-<host>.log); "
    "unset: MILLSTREAM_LOG_DIR, else ~/.millstream/log.")
LOG_FILE_MAX_SIZE: ConfigOption[int] = _option(
    "log.file.max-size", _MEMORY, 100 * _MB,
    "Size at which a process's log file is rotated (renamed to .log.1, older ones shifted).")
LOG_MAX_BACKUPS: ConfigOption[int] = _option(
    "env.log.max", _INT, 10,
    "Rotated log files a process keeps besides its current one (Flink's key); the oldest beyond "
    "these are deleted. At least 1.")
TASK_OUTPUT_MAX_SIZE: ConfigOption[int] = _option(
    "taskmanager.task-output.max-size", _MEMORY, 1 * _MB,
    "Per task attempt, how much of what its user functions print (stdout, stderr) and log "
    "(Python logging) the TaskManager keeps for `millstream logs` and the REST API; the oldest "
    "lines are dropped beyond it.")
TASK_OUTPUT_RETAINED_ATTEMPTS: ConfigOption[int] = _option(
    "taskmanager.task-output.retained-attempts", _INT, 100,
    "Ended task attempts whose output a TaskManager keeps (the oldest are forgotten first); "
    "running attempts are always kept. At least 1.")

# ---- Where an option applies (`millstream run -D` refuses the cluster's) ---------------------
# A job-level option travels with the job: the environment applies the pipeline ones when it builds
# the JobGraph, the JobManager reads the others from the job's configuration (they win over the
# cluster's). A client option tells a client how to reach the cluster. Every other registered
# option is the cluster's: it takes effect when a JobManager or TaskManager starts, never per job.
PIPELINE_OPTIONS: tuple[ConfigOption[Any], ...] = (
    DEFAULT_PARALLELISM, MAX_PARALLELISM, RUNTIME_MODE, OPERATOR_CHAINING, BUFFER_TIMEOUT, AUTO_WATERMARK_INTERVAL)
# The Table API's options of one job's Python functions: a TableConfig sets them, or the job's
# configuration (its environment's Configuration, the file, MILLSTREAM_CONF_*, `millstream run -D`).
TABLE_OPTIONS: tuple[ConfigOption[Any], ...] = (
    ARROW_BATCH_SIZE, ASYNC_SCALAR_MAX_CONCURRENT_OPERATIONS, ASYNC_SCALAR_TIMEOUT, ASYNC_SCALAR_RETRY_STRATEGY,
    ASYNC_SCALAR_RETRY_DELAY, ASYNC_SCALAR_MAX_ATTEMPTS, VECTORIZED_CALC_ENABLED,
    VECTORIZED_AGG_ENABLED, MINI_BATCH_ENABLED, AGG_PHASE_STRATEGY, SINK_NOT_NULL_ENFORCER)
JOBMANAGER_JOB_OPTIONS: tuple[ConfigOption[Any], ...] = (
    SLOT_REQUEST_TIMEOUT,
    RESTART_STRATEGY_TYPE, RESTART_FIXED_DELAY_ATTEMPTS, RESTART_FIXED_DELAY_DELAY, RESTART_FAILURE_RATE_MAX_FAILURES,
    RESTART_FAILURE_RATE_INTERVAL, RESTART_FAILURE_RATE_DELAY, RESTART_EXP_INITIAL_BACKOFF, RESTART_EXP_MAX_BACKOFF,
    RESTART_EXP_MULTIPLIER, RESTART_EXP_RESET_THRESHOLD, RESTART_EXP_JITTER, RESTART_EXP_ATTEMPTS,
    CHECKPOINTING_INTERVAL, CHECKPOINTING_MODE, CHECKPOINTING_TIMEOUT, CHECKPOINTING_MIN_PAUSE,
    CHECKPOINTING_TOLERABLE_FAILURES, CHECKPOINTING_DIR, CHECKPOINTING_NUM_RETAINED, CHECKPOINTING_SAVEPOINT_DIR,
    CHECKPOINTING_MAX_CONCURRENT, CHECKPOINTING_UNALIGNED, CHECKPOINTING_EXTERNALIZED_RETENTION, STATE_BACKEND_TYPE,
    STATE_BACKEND_ROCKSDB_LOCALDIR, STATE_BACKEND_ROCKSDB_TIMER_SERVICE, STATE_BACKEND_ROCKSDB_MEMORY_MANAGED,
    STATE_BACKEND_ROCKSDB_MEMORY_FIXED_PER_SLOT, STATE_BACKEND_ROCKSDB_WRITE_BUFFER_RATIO, CHECKPOINTING_INCREMENTAL,
    SAVEPOINT_PATH, SAVEPOINT_IGNORE_UNCLAIMED_STATE)
CLIENT_OPTIONS: tuple[ConfigOption[Any], ...] = (
    JOBMANAGER_RPC_ADDRESS, JOBMANAGER_RPC_PORT, COLLECT_BATCH_SIZE_MAX, RPC_TIMEOUT, RPC_MAX_MESSAGE_SIZE,
    CLIENT_SUBMISSION_TIMEOUT, SSL_ENABLED, SSL_KEY, SSL_CERT, SSL_TRUSTSTORE, AUTH_CLIENT_TOKEN, AUTH_CLIENT_TOKEN_FILE,
    HA_TYPE, HA_CLUSTER_ID, HA_STORAGE_DIR, HA_ZOOKEEPER_QUORUM, HA_ZOOKEEPER_ROOT, HA_ZOOKEEPER_SESSION_TIMEOUT,
    HA_ZOOKEEPER_CONNECTION_TIMEOUT, HA_ZOOKEEPER_RETRY_WAIT, HA_ZOOKEEPER_MAX_RETRY_ATTEMPTS,
    HA_ZOOKEEPER_TOLERATE_SUSPENDED)


def option_scope(option: ConfigOption[Any]) -> str:
    """``"job"`` (applies per job), ``"client"`` (how a client reaches the cluster) or ``"cluster"``."""
    if option in PIPELINE_OPTIONS or option in JOBMANAGER_JOB_OPTIONS or option in TABLE_OPTIONS:
        return "job"
    return "client" if option in CLIENT_OPTIONS else "cluster"


def registered_options() -> tuple[ConfigOption[Any], ...]:
    """Every declared option, in declaration (component) order."""
    return tuple(_REGISTRY.values())


def find_option(key: str) -> ConfigOption[Any] | None:
    """The option declared under ``key`` or under one of its fallback or deprecated keys."""
    return _REGISTRY.get(key) or _ALIASES.get(key)


def closest_key(key: str, cutoff: float = 0.85) -> str | None:
    """The registered key (or fallback spelling) closest to ``key``, if one is that close."""
    known = {name.lower(): name for name in (*_REGISTRY, *_ALIASES)}
    close = difflib.get_close_matches(key.lower(), known, n=1, cutoff=cutoff)
    return known[close[0]] if close else None


def did_you_mean(key: str, cutoff: float = 0.6) -> str:
    """``": did you mean 'heartbeat.timeout'?"`` for a near miss, else ``""``."""
    close = closest_key(key, cutoff)
    return f": did you mean {close!r}?" if close else ""


_TYPOS_REPORTED: set[tuple[str, str]] = set()  # a process reads its environment more than once


def _warn_if_typo(key: str, source: str) -> None:
    close = closest_key(key)
    if close and (key, source) not in _TYPOS_REPORTED:
        _TYPOS_REPORTED.add((key, source))
        log.warning("unknown configuration key %r%s: did you mean %r?",
                    key, f" (from {source})" if source else "", close)


class Configuration:
    """Resolved values of registered options, plus the user's own keys.

    Registered options are parsed and validated when set and read as their default when unset;
    other keys keep the value they were given.
    """

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], *, source: str = "") -> Configuration:
        """A configuration from raw ``key: value`` pairs (text or typed values)."""
        return cls().update(values, source=source)

    def get(self, option: ConfigOption[T]) -> T:
        return cast(T, self._values.get(option.key, option.default))

    def set(self, option: ConfigOption[Any], value: object) -> Configuration:
        """Parse and store ``value`` (typed or text); ``None`` unsets the option (back to default)."""
        if value is None:
            self._values.pop(option.key, None)
        else:
            self._values[option.key] = option.parse(value)
        return self

    def get_raw(self, key: str, default: Any = None) -> Any:
        """The value under any key: typed for registered options, as given for user keys."""
        option = find_option(key)
        return self.get(option) if option is not None else self._values.get(key, default)

    def update(self, values: Mapping[str, Any], *, source: str = "") -> Configuration:
        """Apply one layer of raw ``key: value`` pairs; ``None`` values are skipped.

        Within a layer a registered key wins over its fallback or deprecated spellings.
        """
        for raw_key, value in sorted(values.items(), key=lambda kv: str(kv[0]) not in _ALIASES):
            key = str(raw_key).strip()
            option = find_option(key)
            if value is None:
                continue
            if option is None:
                _warn_if_typo(key, source)
                self._values[key] = value
                continue
            if key in option.deprecated_keys:
                log.warning("configuration key %r is deprecated: use %r", key, option.key)
            self._values[option.key] = option.parse(value)
        return self

    def to_dict(self, *, include_defaults: bool = False,
                as_strings: bool = False) -> dict[str, Any]:
        """The values set (with ``include_defaults``, every option's effective value too).

        ``as_strings`` renders text that :meth:`from_dict` reads back, e.g. for a protobuf map.
        """
        result = {o.key: o.default for o in _REGISTRY.values()} if include_defaults else {}
        result.update(self._values)
        if not as_strings:
            return result
        return {key: option.format(value) if (option := _REGISTRY.get(key)) else _user_text(value)
                for key, value in result.items() if value is not None}

    def user_keys(self) -> list[str]:
        """Keys set that are not registered options (a job's own parameters, or typos)."""
        return [key for key in self._values if key not in _REGISTRY]

    def copy(self) -> Configuration:
        clone = Configuration()
        clone._values = dict(self._values)
        return clone

    def __contains__(self, item: object) -> bool:
        """Whether a key or option was set explicitly (not merely defaulted)."""
        return (item.key if isinstance(item, ConfigOption) else item) in self._values

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Configuration) and self._values == other._values

    def __repr__(self) -> str:
        return f"Configuration({self._values!r})"


def _user_text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ";".join(_user_text(item) for item in value)
    return _text(value) if isinstance(value, (str, int, float)) else str(value)


def _flatten(data: Mapping[Any, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in data.items():
        key = f"{prefix}{name}"
        option = find_option(key)
        # A mapping under a list option (millstream.spark.conf) is its value, not more nesting.
        if isinstance(value, Mapping) and (option is None or option.type is not OptionType.LIST):
            flat.update(_flatten(value, key + "."))
        else:
            flat[key] = value
    return flat


def read_yaml_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The flat ``key: value`` pairs of a YAML file, in Flink's flat form or nested mappings."""
    file = Path(path)
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigurationError(f"configuration file not found: {file}") from None
    except (OSError, yaml.YAMLError) as error:
        raise ConfigurationError(f"cannot read configuration file {file}: {error}") from error
    if data is not None and not isinstance(data, Mapping):
        raise ConfigurationError(f"{file}: expected a mapping of keys to values, got {data!r}")
    return _flatten(data or {})


def parse_host_port(value: str, what: str = ENV_JOBMANAGER) -> tuple[str, int | None]:
    """ "host:port", "host" or "[::1]:6123" -> (host, port or None)."""
    match = re.fullmatch(r"\s*(\[[^\]]*\]|[^:\s]*)(?::(\d{1,5}))?\s*", value)
    if match is None or match.group(1).strip("[]") == "" or int(match.group(2) or 0) > 65535:
        raise ConfigurationError(f"{what}: expected host:port, got {value!r}")
    return match.group(1).strip("[]"), int(match.group(2)) if match.group(2) else None


def parse_port_range(text: str, key: str) -> range:
    """``"9249"`` or ``"50100-50200"`` (inclusive, Flink's spellings) as the ports to try, in order;
    ``"0"`` alone is any free port. Bad input raises ConfigurationError naming the option ``key``."""
    match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", str(text))
    if match is None:
        raise ConfigurationError(f"{key}: expected a port or a range such as 50100-50200, got {text!r}")
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) else first
    # "0-10" would mean "any free port" on its first try: only "0" alone says that.
    if not 0 <= first <= last <= 65535 or (first == 0 and last != 0):
        raise ConfigurationError(f"{key}: {text!r} is not a port or a range within 0-65535 "
                                 f"(first <= last; 0 only alone, for any free port)")
    return range(first, last + 1)


def env_overrides(env: Mapping[str, str]) -> dict[str, str]:
    """The ``key: value`` layer given by ``MILLSTREAM_JOBMANAGER`` and ``MILLSTREAM_CONF_*``.

    A ``MILLSTREAM_CONF_*`` name matches a key (or fallback spelling) with dots and dashes as
    underscores, ignoring case; any other name becomes a user key, lower case, ``_`` read as ``.``.
    These win over ``MILLSTREAM_JOBMANAGER``, the shorter, general form.
    """
    layer: dict[str, str] = {}
    if env.get(ENV_JOBMANAGER):
        # Several JobManagers (a:6123,b:6123, the client finds the leader): the first is the address.
        host, port = parse_host_port(env[ENV_JOBMANAGER].split(",", 1)[0])
        layer[JOBMANAGER_RPC_ADDRESS.key] = host
        if port is not None:
            layer[JOBMANAGER_RPC_PORT.key] = str(port)
    known = {re.sub(r"[.-]", "_", key).upper(): key for key in (*_ALIASES, *_REGISTRY)}
    for name, value in env.items():
        suffix = name[len(ENV_PREFIX):] if name.upper().startswith(ENV_PREFIX) else ""
        if suffix:
            layer[known.get(suffix.upper(), suffix.lower().replace("_", "."))] = value
    return layer


def parse_dynamic_properties(args: Iterable[str]) -> dict[str, str]:
    """``["key=value", "-Dkey=value"]`` -> ``{"key": "value"}``: the values of ``-D`` flags."""
    layer: dict[str, str] = {}
    for arg in args:
        key, equals, value = arg.removeprefix("-D").partition("=")
        if not equals or not key.strip():
            raise ConfigurationError(f"invalid -D property {arg!r}: expected key=value")
        layer[key.strip()] = value.strip()
    return layer


def load_configuration(path: str | os.PathLike[str] | None = None, *,
                       env: Mapping[str, str] | None = None,
                       dynamic_properties: Iterable[str] = ()) -> Configuration:
    """Defaults -> YAML file -> environment -> ``-D key=value``, a later layer winning.

    ``path`` defaults to ``$MILLSTREAM_CONFIG_FILE`` (none when unset), ``env`` to ``os.environ``.
    """
    env = os.environ if env is None else env
    path = path if path is not None else env.get(ENV_CONFIG_FILE) or None
    config = Configuration()
    if path is not None:
        config.update(read_yaml_file(path), source=str(path))
    config.update(env_overrides(env), source="environment")
    return config.update(parse_dynamic_properties(dynamic_properties), source="-D")


def render_markdown_table() -> str:
    """The documentation table of every registered option: key, type, default, description."""
    lines = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    for option in _REGISTRY.values():
        text = option.format(option.default) or '""'
        default = "(none)" if option.default in (None, ()) else f"`{text}`"
        notes = [option.description]
        for label, names in (("One of", option.choices), ("Also read from", option.fallback_keys),
                             ("Deprecated keys", option.deprecated_keys)):
            if names:
                notes.append(f"{label}: " + ", ".join(f"`{name}`" for name in names) + ".")
        cells = [f"`{option.key}`", option.type.value, default, " ".join(notes)]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_markdown_table(), end="")
