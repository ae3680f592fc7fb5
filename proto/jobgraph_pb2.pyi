from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DistributionPattern(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DISTRIBUTION_PATTERN_UNSPECIFIED: _ClassVar[DistributionPattern]
    POINTWISE: _ClassVar[DistributionPattern]
    ALL_TO_ALL: _ClassVar[DistributionPattern]

class ResultPartitionType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESULT_PARTITION_TYPE_UNSPECIFIED: _ClassVar[ResultPartitionType]
    PIPELINED_BOUNDED: _ClassVar[ResultPartitionType]
    BLOCKING: _ClassVar[ResultPartitionType]

class RuntimeMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUNTIME_MODE_UNSPECIFIED: _ClassVar[RuntimeMode]
    STREAMING: _ClassVar[RuntimeMode]
    BATCH: _ClassVar[RuntimeMode]
DISTRIBUTION_PATTERN_UNSPECIFIED: DistributionPattern
POINTWISE: DistributionPattern
ALL_TO_ALL: DistributionPattern
RESULT_PARTITION_TYPE_UNSPECIFIED: ResultPartitionType
PIPELINED_BOUNDED: ResultPartitionType
BLOCKING: ResultPartitionType
RUNTIME_MODE_UNSPECIFIED: RuntimeMode
STREAMING: RuntimeMode
BATCH: RuntimeMode

class RestartStrategy(_message.Message):
    __slots__ = ("type", "attempts", "delay_ms", "max_failures_per_interval", "failure_rate_interval_ms", "initial_backoff_ms", "max_backoff_ms", "backoff_multiplier", "reset_backoff_threshold_ms", "jitter_factor")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_FAILURES_PER_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    FAILURE_RATE_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    INITIAL_BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    RESET_BACKOFF_THRESHOLD_MS_FIELD_NUMBER: _ClassVar[int]
    JITTER_FACTOR_FIELD_NUMBER: _ClassVar[int]
    type: str
    attempts: int
    delay_ms: int
    max_failures_per_interval: int
    failure_rate_interval_ms: int
    initial_backoff_ms: int
    max_backoff_ms: int
    backoff_multiplier: float
    reset_backoff_threshold_ms: int
    jitter_factor: float
    def __init__(self, type: _Optional[str] = ..., attempts: _Optional[int] = ..., delay_ms: _Optional[int] = ..., max_failures_per_interval: _Optional[int] = ..., failure_rate_interval_ms: _Optional[int] = ..., initial_backoff_ms: _Optional[int] = ..., max_backoff_ms: _Optional[int] = ..., backoff_multiplier: _Optional[float] = ..., reset_backoff_threshold_ms: _Optional[int] = ..., jitter_factor: _Optional[float] = ...) -> None: ...

class ExecutionConfig(_message.Message):
    __slots__ = ("runtime_mode", "parallelism", "max_parallelism", "checkpoint_interval_ms", "checkpointing_mode", "restart_strategy", "buffer_timeout_ms", "configuration", "auto_watermark_interval_ms")
    class ConfigurationEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RUNTIME_MODE_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    MAX_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTING_MODE_FIELD_NUMBER: _ClassVar[int]
    RESTART_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    BUFFER_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    CONFIGURATION_FIELD_NUMBER: _ClassVar[int]
    AUTO_WATERMARK_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    runtime_mode: RuntimeMode
    parallelism: int
    max_parallelism: int
    checkpoint_interval_ms: int
    checkpointing_mode: str
    restart_strategy: RestartStrategy
    buffer_timeout_ms: int
    configuration: _containers.ScalarMap[str, str]
    auto_watermark_interval_ms: int
    def __init__(self, runtime_mode: _Optional[_Union[RuntimeMode, str]] = ..., parallelism: _Optional[int] = ..., max_parallelism: _Optional[int] = ..., checkpoint_interval_ms: _Optional[int] = ..., checkpointing_mode: _Optional[str] = ..., restart_strategy: _Optional[_Union[RestartStrategy, _Mapping]] = ..., buffer_timeout_ms: _Optional[int] = ..., configuration: _Optional[_Mapping[str, str]] = ..., auto_watermark_interval_ms: _Optional[int] = ...) -> None: ...

class Partitioner(_message.Message):
    __slots__ = ("ship_strategy", "payload", "max_parallelism")
    SHIP_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    MAX_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    ship_strategy: str
    payload: bytes
    max_parallelism: int
    def __init__(self, ship_strategy: _Optional[str] = ..., payload: _Optional[bytes] = ..., max_parallelism: _Optional[int] = ...) -> None: ...

class IntermediateDataSet(_message.Message):
    __slots__ = ("id", "source_node_id", "output_tag", "consumer_vertex", "target_node_id", "partitioner", "partition_type", "combiner")
    ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TAG_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_VERTEX_FIELD_NUMBER: _ClassVar[int]
    TARGET_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONER_FIELD_NUMBER: _ClassVar[int]
    PARTITION_TYPE_FIELD_NUMBER: _ClassVar[int]
    COMBINER_FIELD_NUMBER: _ClassVar[int]
    id: bytes
    source_node_id: int
    output_tag: str
    consumer_vertex: bytes
    target_node_id: int
    partitioner: Partitioner
    partition_type: ResultPartitionType
    combiner: bytes
    def __init__(self, id: _Optional[bytes] = ..., source_node_id: _Optional[int] = ..., output_tag: _Optional[str] = ..., consumer_vertex: _Optional[bytes] = ..., target_node_id: _Optional[int] = ..., partitioner: _Optional[_Union[Partitioner, _Mapping]] = ..., partition_type: _Optional[_Union[ResultPartitionType, str]] = ..., combiner: _Optional[bytes] = ...) -> None: ...

class JobEdge(_message.Message):
    __slots__ = ("source_vertex", "result_id", "ship_strategy", "distribution", "partition_type", "target_node_id", "input_index")
    SOURCE_VERTEX_FIELD_NUMBER: _ClassVar[int]
    RESULT_ID_FIELD_NUMBER: _ClassVar[int]
    SHIP_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    DISTRIBUTION_FIELD_NUMBER: _ClassVar[int]
    PARTITION_TYPE_FIELD_NUMBER: _ClassVar[int]
    TARGET_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_INDEX_FIELD_NUMBER: _ClassVar[int]
    source_vertex: bytes
    result_id: bytes
    ship_strategy: str
    distribution: DistributionPattern
    partition_type: ResultPartitionType
    target_node_id: int
    input_index: int
    def __init__(self, source_vertex: _Optional[bytes] = ..., result_id: _Optional[bytes] = ..., ship_strategy: _Optional[str] = ..., distribution: _Optional[_Union[DistributionPattern, str]] = ..., partition_type: _Optional[_Union[ResultPartitionType, str]] = ..., target_node_id: _Optional[int] = ..., input_index: _Optional[int] = ...) -> None: ...

class ChainedOutput(_message.Message):
    __slots__ = ("target_node_id", "output_tag")
    TARGET_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TAG_FIELD_NUMBER: _ClassVar[int]
    target_node_id: int
    output_tag: str
    def __init__(self, target_node_id: _Optional[int] = ..., output_tag: _Optional[str] = ...) -> None: ...

class StreamOperator(_message.Message):
    __slots__ = ("node_id", "name", "operator_id", "uid", "uid_hash", "kind", "factory", "chained_outputs", "non_chained_outputs", "state_key_selector", "state_key_selector2", "coordinator")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_ID_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    UID_HASH_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    FACTORY_FIELD_NUMBER: _ClassVar[int]
    CHAINED_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    NON_CHAINED_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    STATE_KEY_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    STATE_KEY_SELECTOR2_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    name: str
    operator_id: bytes
    uid: str
    uid_hash: str
    kind: str
    factory: bytes
    chained_outputs: _containers.RepeatedCompositeFieldContainer[ChainedOutput]
    non_chained_outputs: _containers.RepeatedScalarFieldContainer[bytes]
    state_key_selector: bytes
    state_key_selector2: bytes
    coordinator: bytes
    def __init__(self, node_id: _Optional[int] = ..., name: _Optional[str] = ..., operator_id: _Optional[bytes] = ..., uid: _Optional[str] = ..., uid_hash: _Optional[str] = ..., kind: _Optional[str] = ..., factory: _Optional[bytes] = ..., chained_outputs: _Optional[_Iterable[_Union[ChainedOutput, _Mapping]]] = ..., non_chained_outputs: _Optional[_Iterable[bytes]] = ..., state_key_selector: _Optional[bytes] = ..., state_key_selector2: _Optional[bytes] = ..., coordinator: _Optional[bytes] = ...) -> None: ...

class JobVertex(_message.Message):
    __slots__ = ("id", "name", "parallelism", "max_parallelism", "slot_sharing_group", "operators", "inputs", "produced", "is_source")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    MAX_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    SLOT_SHARING_GROUP_FIELD_NUMBER: _ClassVar[int]
    OPERATORS_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    PRODUCED_FIELD_NUMBER: _ClassVar[int]
    IS_SOURCE_FIELD_NUMBER: _ClassVar[int]
    id: bytes
    name: str
    parallelism: int
    max_parallelism: int
    slot_sharing_group: str
    operators: _containers.RepeatedCompositeFieldContainer[StreamOperator]
    inputs: _containers.RepeatedCompositeFieldContainer[JobEdge]
    produced: _containers.RepeatedCompositeFieldContainer[IntermediateDataSet]
    is_source: bool
    def __init__(self, id: _Optional[bytes] = ..., name: _Optional[str] = ..., parallelism: _Optional[int] = ..., max_parallelism: _Optional[int] = ..., slot_sharing_group: _Optional[str] = ..., operators: _Optional[_Iterable[_Union[StreamOperator, _Mapping]]] = ..., inputs: _Optional[_Iterable[_Union[JobEdge, _Mapping]]] = ..., produced: _Optional[_Iterable[_Union[IntermediateDataSet, _Mapping]]] = ..., is_source: _Optional[bool] = ...) -> None: ...

class JobGraph(_message.Message):
    __slots__ = ("job_id", "job_name", "vertices", "execution_config")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    VERTICES_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_CONFIG_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    job_name: str
    vertices: _containers.RepeatedCompositeFieldContainer[JobVertex]
    execution_config: ExecutionConfig
    def __init__(self, job_id: _Optional[bytes] = ..., job_name: _Optional[str] = ..., vertices: _Optional[_Iterable[_Union[JobVertex, _Mapping]]] = ..., execution_config: _Optional[_Union[ExecutionConfig, _Mapping]] = ...) -> None: ...
