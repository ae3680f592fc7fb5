from millstream.proto import jobgraph_pb2 as _jobgraph_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATUS_UNSPECIFIED: _ClassVar[JobStatus]
    INITIALIZING: _ClassVar[JobStatus]
    CREATED: _ClassVar[JobStatus]
    RUNNING: _ClassVar[JobStatus]
    FAILING: _ClassVar[JobStatus]
    FAILED: _ClassVar[JobStatus]
    CANCELLING: _ClassVar[JobStatus]
    CANCELED: _ClassVar[JobStatus]
    FINISHED: _ClassVar[JobStatus]
    RESTARTING: _ClassVar[JobStatus]
    SUSPENDED: _ClassVar[JobStatus]

class ExecutionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTION_STATE_UNSPECIFIED: _ClassVar[ExecutionState]
    EXEC_CREATED: _ClassVar[ExecutionState]
    EXEC_SCHEDULED: _ClassVar[ExecutionState]
    EXEC_DEPLOYING: _ClassVar[ExecutionState]
    EXEC_INITIALIZING: _ClassVar[ExecutionState]
    EXEC_RUNNING: _ClassVar[ExecutionState]
    EXEC_FINISHED: _ClassVar[ExecutionState]
    EXEC_CANCELING: _ClassVar[ExecutionState]
    EXEC_CANCELED: _ClassVar[ExecutionState]
    EXEC_FAILED: _ClassVar[ExecutionState]
JOB_STATUS_UNSPECIFIED: JobStatus
INITIALIZING: JobStatus
CREATED: JobStatus
RUNNING: JobStatus
FAILING: JobStatus
FAILED: JobStatus
CANCELLING: JobStatus
CANCELED: JobStatus
FINISHED: JobStatus
RESTARTING: JobStatus
SUSPENDED: JobStatus
EXECUTION_STATE_UNSPECIFIED: ExecutionState
EXEC_CREATED: ExecutionState
EXEC_SCHEDULED: ExecutionState
EXEC_DEPLOYING: ExecutionState
EXEC_INITIALIZING: ExecutionState
EXEC_RUNNING: ExecutionState
EXEC_FINISHED: ExecutionState
EXEC_CANCELING: ExecutionState
EXEC_CANCELED: ExecutionState
EXEC_FAILED: ExecutionState

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Artifact(_message.Message):
    __slots__ = ("name", "content", "archive_target")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_TARGET_FIELD_NUMBER: _ClassVar[int]
    name: str
    content: bytes
    archive_target: str
    def __init__(self, name: _Optional[str] = ..., content: _Optional[bytes] = ..., archive_target: _Optional[str] = ...) -> None: ...

class ArtifactRef(_message.Message):
    __slots__ = ("name", "blob_key", "archive_target")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BLOB_KEY_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_TARGET_FIELD_NUMBER: _ClassVar[int]
    name: str
    blob_key: str
    archive_target: str
    def __init__(self, name: _Optional[str] = ..., blob_key: _Optional[str] = ..., archive_target: _Optional[str] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("submission_id", "job_graph", "artifacts", "accepted_at_ms")
    SUBMISSION_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_GRAPH_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    submission_id: str
    job_graph: bytes
    artifacts: _containers.RepeatedCompositeFieldContainer[Artifact]
    accepted_at_ms: int
    def __init__(self, submission_id: _Optional[str] = ..., job_graph: _Optional[bytes] = ..., artifacts: _Optional[_Iterable[_Union[Artifact, _Mapping]]] = ..., accepted_at_ms: _Optional[int] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("job_id", "duplicate")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    duplicate: bool
    def __init__(self, job_id: _Optional[bytes] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class JobIdRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    def __init__(self, job_id: _Optional[bytes] = ...) -> None: ...

class JobFailure(_message.Message):
    __slots__ = ("message", "task_name", "traceback", "secondary")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    SECONDARY_FIELD_NUMBER: _ClassVar[int]
    message: str
    task_name: str
    traceback: str
    secondary: bool
    def __init__(self, message: _Optional[str] = ..., task_name: _Optional[str] = ..., traceback: _Optional[str] = ..., secondary: _Optional[bool] = ...) -> None: ...

class JobSummary(_message.Message):
    __slots__ = ("job_id", "job_name", "status", "start_time_ms", "end_time_ms", "num_tasks", "tasks_per_state", "failure", "parallelism", "vertices", "slot_wait", "num_restarts", "checkpoints", "rescales")
    class TasksPerStateEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    START_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    END_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    NUM_TASKS_FIELD_NUMBER: _ClassVar[int]
    TASKS_PER_STATE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    VERTICES_FIELD_NUMBER: _ClassVar[int]
    SLOT_WAIT_FIELD_NUMBER: _ClassVar[int]
    NUM_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    RESCALES_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    job_name: str
    status: JobStatus
    start_time_ms: int
    end_time_ms: int
    num_tasks: int
    tasks_per_state: _containers.ScalarMap[str, int]
    failure: JobFailure
    parallelism: int
    vertices: _containers.RepeatedCompositeFieldContainer[VertexSummary]
    slot_wait: SlotWait
    num_restarts: int
    checkpoints: CheckpointSummary
    rescales: _containers.RepeatedCompositeFieldContainer[RescaleEvent]
    def __init__(self, job_id: _Optional[bytes] = ..., job_name: _Optional[str] = ..., status: _Optional[_Union[JobStatus, str]] = ..., start_time_ms: _Optional[int] = ..., end_time_ms: _Optional[int] = ..., num_tasks: _Optional[int] = ..., tasks_per_state: _Optional[_Mapping[str, int]] = ..., failure: _Optional[_Union[JobFailure, _Mapping]] = ..., parallelism: _Optional[int] = ..., vertices: _Optional[_Iterable[_Union[VertexSummary, _Mapping]]] = ..., slot_wait: _Optional[_Union[SlotWait, _Mapping]] = ..., num_restarts: _Optional[int] = ..., checkpoints: _Optional[_Union[CheckpointSummary, _Mapping]] = ..., rescales: _Optional[_Iterable[_Union[RescaleEvent, _Mapping]]] = ...) -> None: ...

class RescaleEvent(_message.Message):
    __slots__ = ("timestamp_ms", "old_parallelism", "new_parallelism", "reason", "rescale_id", "start_timestamp_ms", "trigger_cause", "vertices")
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    OLD_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    NEW_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESCALE_ID_FIELD_NUMBER: _ClassVar[int]
    START_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_CAUSE_FIELD_NUMBER: _ClassVar[int]
    VERTICES_FIELD_NUMBER: _ClassVar[int]
    timestamp_ms: int
    old_parallelism: int
    new_parallelism: int
    reason: str
    rescale_id: bytes
    start_timestamp_ms: int
    trigger_cause: str
    vertices: _containers.RepeatedCompositeFieldContainer[VertexRescale]
    def __init__(self, timestamp_ms: _Optional[int] = ..., old_parallelism: _Optional[int] = ..., new_parallelism: _Optional[int] = ..., reason: _Optional[str] = ..., rescale_id: _Optional[bytes] = ..., start_timestamp_ms: _Optional[int] = ..., trigger_cause: _Optional[str] = ..., vertices: _Optional[_Iterable[_Union[VertexRescale, _Mapping]]] = ...) -> None: ...

class VertexRescale(_message.Message):
    __slots__ = ("vertex_id", "name", "slot_sharing_group", "desired_parallelism", "sufficient_parallelism", "pre_rescale_parallelism", "post_rescale_parallelism")
    VERTEX_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SLOT_SHARING_GROUP_FIELD_NUMBER: _ClassVar[int]
    DESIRED_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    SUFFICIENT_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    PRE_RESCALE_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    POST_RESCALE_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    vertex_id: bytes
    name: str
    slot_sharing_group: str
    desired_parallelism: int
    sufficient_parallelism: int
    pre_rescale_parallelism: int
    post_rescale_parallelism: int
    def __init__(self, vertex_id: _Optional[bytes] = ..., name: _Optional[str] = ..., slot_sharing_group: _Optional[str] = ..., desired_parallelism: _Optional[int] = ..., sufficient_parallelism: _Optional[int] = ..., pre_rescale_parallelism: _Optional[int] = ..., post_rescale_parallelism: _Optional[int] = ...) -> None: ...

class CheckpointSummary(_message.Message):
    __slots__ = ("interval_ms", "directory", "num_completed", "num_failed", "num_in_progress", "last_completed_id", "last_duration_ms", "last_size_bytes", "last_completed_at_ms", "last_failure_reason", "last_failure_message", "latest_restored_id", "latest_restored_at_ms", "latest_restored_path", "history", "latest_failed", "latest_savepoint")
    INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    NUM_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    NUM_FAILED_FIELD_NUMBER: _ClassVar[int]
    NUM_IN_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    LAST_COMPLETED_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAST_COMPLETED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_FAILURE_REASON_FIELD_NUMBER: _ClassVar[int]
    LAST_FAILURE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LATEST_RESTORED_ID_FIELD_NUMBER: _ClassVar[int]
    LATEST_RESTORED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    LATEST_RESTORED_PATH_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    LATEST_FAILED_FIELD_NUMBER: _ClassVar[int]
    LATEST_SAVEPOINT_FIELD_NUMBER: _ClassVar[int]
    interval_ms: int
    directory: str
    num_completed: int
    num_failed: int
    num_in_progress: int
    last_completed_id: int
    last_duration_ms: int
    last_size_bytes: int
    last_completed_at_ms: int
    last_failure_reason: str
    last_failure_message: str
    latest_restored_id: int
    latest_restored_at_ms: int
    latest_restored_path: str
    history: _containers.RepeatedCompositeFieldContainer[CheckpointHistoryEntry]
    latest_failed: CheckpointHistoryEntry
    latest_savepoint: CheckpointHistoryEntry
    def __init__(self, interval_ms: _Optional[int] = ..., directory: _Optional[str] = ..., num_completed: _Optional[int] = ..., num_failed: _Optional[int] = ..., num_in_progress: _Optional[int] = ..., last_completed_id: _Optional[int] = ..., last_duration_ms: _Optional[int] = ..., last_size_bytes: _Optional[int] = ..., last_completed_at_ms: _Optional[int] = ..., last_failure_reason: _Optional[str] = ..., last_failure_message: _Optional[str] = ..., latest_restored_id: _Optional[int] = ..., latest_restored_at_ms: _Optional[int] = ..., latest_restored_path: _Optional[str] = ..., history: _Optional[_Iterable[_Union[CheckpointHistoryEntry, _Mapping]]] = ..., latest_failed: _Optional[_Union[CheckpointHistoryEntry, _Mapping]] = ..., latest_savepoint: _Optional[_Union[CheckpointHistoryEntry, _Mapping]] = ...) -> None: ...

class CheckpointHistoryEntry(_message.Message):
    __slots__ = ("id", "status", "is_savepoint", "trigger_timestamp_ms", "end_timestamp_ms", "size_bytes", "failure_message", "num_subtasks", "num_acknowledged_subtasks", "external_path", "subtasks")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    IS_SAVEPOINT_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    END_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FAILURE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NUM_SUBTASKS_FIELD_NUMBER: _ClassVar[int]
    NUM_ACKNOWLEDGED_SUBTASKS_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_PATH_FIELD_NUMBER: _ClassVar[int]
    SUBTASKS_FIELD_NUMBER: _ClassVar[int]
    id: int
    status: str
    is_savepoint: bool
    trigger_timestamp_ms: int
    end_timestamp_ms: int
    size_bytes: int
    failure_message: str
    num_subtasks: int
    num_acknowledged_subtasks: int
    external_path: str
    subtasks: _containers.RepeatedCompositeFieldContainer[SubtaskCheckpointStats]
    def __init__(self, id: _Optional[int] = ..., status: _Optional[str] = ..., is_savepoint: _Optional[bool] = ..., trigger_timestamp_ms: _Optional[int] = ..., end_timestamp_ms: _Optional[int] = ..., size_bytes: _Optional[int] = ..., failure_message: _Optional[str] = ..., num_subtasks: _Optional[int] = ..., num_acknowledged_subtasks: _Optional[int] = ..., external_path: _Optional[str] = ..., subtasks: _Optional[_Iterable[_Union[SubtaskCheckpointStats, _Mapping]]] = ...) -> None: ...

class SubtaskCheckpointStats(_message.Message):
    __slots__ = ("vertex_id", "subtask_index", "ack_timestamp_ms", "state_size", "sync_duration_ms", "async_duration_ms", "alignment_duration_ms", "start_delay_ms")
    VERTEX_ID_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    ACK_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    STATE_SIZE_FIELD_NUMBER: _ClassVar[int]
    SYNC_DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    ASYNC_DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    ALIGNMENT_DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    START_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    vertex_id: bytes
    subtask_index: int
    ack_timestamp_ms: int
    state_size: int
    sync_duration_ms: int
    async_duration_ms: int
    alignment_duration_ms: int
    start_delay_ms: int
    def __init__(self, vertex_id: _Optional[bytes] = ..., subtask_index: _Optional[int] = ..., ack_timestamp_ms: _Optional[int] = ..., state_size: _Optional[int] = ..., sync_duration_ms: _Optional[int] = ..., async_duration_ms: _Optional[int] = ..., alignment_duration_ms: _Optional[int] = ..., start_delay_ms: _Optional[int] = ...) -> None: ...

class VertexSummary(_message.Message):
    __slots__ = ("vertex_id", "name", "parallelism", "tasks_per_state", "records_in", "records_out", "metrics", "max_parallelism", "slot_sharing_group")
    class TasksPerStateEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    VERTEX_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    TASKS_PER_STATE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_IN_FIELD_NUMBER: _ClassVar[int]
    RECORDS_OUT_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    MAX_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    SLOT_SHARING_GROUP_FIELD_NUMBER: _ClassVar[int]
    vertex_id: bytes
    name: str
    parallelism: int
    tasks_per_state: _containers.ScalarMap[str, int]
    records_in: int
    records_out: int
    metrics: _containers.ScalarMap[str, float]
    max_parallelism: int
    slot_sharing_group: str
    def __init__(self, vertex_id: _Optional[bytes] = ..., name: _Optional[str] = ..., parallelism: _Optional[int] = ..., tasks_per_state: _Optional[_Mapping[str, int]] = ..., records_in: _Optional[int] = ..., records_out: _Optional[int] = ..., metrics: _Optional[_Mapping[str, float]] = ..., max_parallelism: _Optional[int] = ..., slot_sharing_group: _Optional[str] = ...) -> None: ...

class SlotWait(_message.Message):
    __slots__ = ("slots_required", "slots_allocated", "timeout_at_ms")
    SLOTS_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    SLOTS_ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_AT_MS_FIELD_NUMBER: _ClassVar[int]
    slots_required: int
    slots_allocated: int
    timeout_at_ms: int
    def __init__(self, slots_required: _Optional[int] = ..., slots_allocated: _Optional[int] = ..., timeout_at_ms: _Optional[int] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobSummary]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobSummary, _Mapping]]] = ...) -> None: ...

class CollectBatch(_message.Message):
    __slots__ = ("collect_id", "subtask_index", "sequence", "payload")
    COLLECT_ID_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    collect_id: str
    subtask_index: int
    sequence: int
    payload: bytes
    def __init__(self, collect_id: _Optional[str] = ..., subtask_index: _Optional[int] = ..., sequence: _Optional[int] = ..., payload: _Optional[bytes] = ...) -> None: ...

class JobStatusUpdate(_message.Message):
    __slots__ = ("summary", "terminal", "printed_lines", "printed_lines_dropped")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_FIELD_NUMBER: _ClassVar[int]
    PRINTED_LINES_FIELD_NUMBER: _ClassVar[int]
    PRINTED_LINES_DROPPED_FIELD_NUMBER: _ClassVar[int]
    summary: JobSummary
    terminal: bool
    printed_lines: _containers.RepeatedScalarFieldContainer[str]
    printed_lines_dropped: int
    def __init__(self, summary: _Optional[_Union[JobSummary, _Mapping]] = ..., terminal: _Optional[bool] = ..., printed_lines: _Optional[_Iterable[str]] = ..., printed_lines_dropped: _Optional[int] = ...) -> None: ...

class FetchCollectRequest(_message.Message):
    __slots__ = ("job_id", "offset", "max_bytes")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    offset: int
    max_bytes: int
    def __init__(self, job_id: _Optional[bytes] = ..., offset: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class FetchCollectResponse(_message.Message):
    __slots__ = ("batches", "next_offset", "end_of_data", "summary")
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OF_DATA_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    batches: _containers.RepeatedCompositeFieldContainer[CollectBatch]
    next_offset: int
    end_of_data: bool
    summary: JobSummary
    def __init__(self, batches: _Optional[_Iterable[_Union[CollectBatch, _Mapping]]] = ..., next_offset: _Optional[int] = ..., end_of_data: _Optional[bool] = ..., summary: _Optional[_Union[JobSummary, _Mapping]] = ...) -> None: ...

class ClusterOverview(_message.Message):
    __slots__ = ("taskmanagers", "slots_total", "slots_available", "jobs_running", "jobs_finished", "jobs_failed", "jobs_cancelled", "max_event_loop_lag_ms")
    TASKMANAGERS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SLOTS_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    JOBS_RUNNING_FIELD_NUMBER: _ClassVar[int]
    JOBS_FINISHED_FIELD_NUMBER: _ClassVar[int]
    JOBS_FAILED_FIELD_NUMBER: _ClassVar[int]
    JOBS_CANCELLED_FIELD_NUMBER: _ClassVar[int]
    MAX_EVENT_LOOP_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    taskmanagers: int
    slots_total: int
    slots_available: int
    jobs_running: int
    jobs_finished: int
    jobs_failed: int
    jobs_cancelled: int
    max_event_loop_lag_ms: int
    def __init__(self, taskmanagers: _Optional[int] = ..., slots_total: _Optional[int] = ..., slots_available: _Optional[int] = ..., jobs_running: _Optional[int] = ..., jobs_finished: _Optional[int] = ..., jobs_failed: _Optional[int] = ..., jobs_cancelled: _Optional[int] = ..., max_event_loop_lag_ms: _Optional[int] = ...) -> None: ...

class SavepointRequest(_message.Message):
    __slots__ = ("job_id", "target_directory", "stop", "drain")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    target_directory: str
    stop: bool
    drain: bool
    def __init__(self, job_id: _Optional[bytes] = ..., target_directory: _Optional[str] = ..., stop: _Optional[bool] = ..., drain: _Optional[bool] = ...) -> None: ...

class SavepointResponse(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    def __init__(self, path: _Optional[str] = ...) -> None: ...

class CheckpointRequest(_message.Message):
    __slots__ = ("job_id", "full")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FULL_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    full: bool
    def __init__(self, job_id: _Optional[bytes] = ..., full: _Optional[bool] = ...) -> None: ...

class CheckpointResponse(_message.Message):
    __slots__ = ("checkpoint_id",)
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: int
    def __init__(self, checkpoint_id: _Optional[int] = ...) -> None: ...

class DisposeSavepointRequest(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    def __init__(self, path: _Optional[str] = ...) -> None: ...

class DisposeSavepointResponse(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    def __init__(self, path: _Optional[str] = ...) -> None: ...

class GetBlobRequest(_message.Message):
    __slots__ = ("blob_key",)
    BLOB_KEY_FIELD_NUMBER: _ClassVar[int]
    blob_key: str
    def __init__(self, blob_key: _Optional[str] = ...) -> None: ...

class BlobChunk(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class SlotStatus(_message.Message):
    __slots__ = ("slot_index", "allocation_id", "job_id")
    SLOT_INDEX_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    slot_index: int
    allocation_id: bytes
    job_id: bytes
    def __init__(self, slot_index: _Optional[int] = ..., allocation_id: _Optional[bytes] = ..., job_id: _Optional[bytes] = ...) -> None: ...

class SlotReport(_message.Message):
    __slots__ = ("slots",)
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    slots: _containers.RepeatedCompositeFieldContainer[SlotStatus]
    def __init__(self, slots: _Optional[_Iterable[_Union[SlotStatus, _Mapping]]] = ...) -> None: ...

class RegisterTaskManagerRequest(_message.Message):
    __slots__ = ("resource_id", "address", "data_address", "num_slots", "slot_report")
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DATA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    NUM_SLOTS_FIELD_NUMBER: _ClassVar[int]
    SLOT_REPORT_FIELD_NUMBER: _ClassVar[int]
    resource_id: str
    address: str
    data_address: str
    num_slots: int
    slot_report: SlotReport
    def __init__(self, resource_id: _Optional[str] = ..., address: _Optional[str] = ..., data_address: _Optional[str] = ..., num_slots: _Optional[int] = ..., slot_report: _Optional[_Union[SlotReport, _Mapping]] = ...) -> None: ...

class RegisterTaskManagerResponse(_message.Message):
    __slots__ = ("registration_id", "heartbeat_interval_ms", "heartbeat_timeout_ms")
    REGISTRATION_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    registration_id: str
    heartbeat_interval_ms: int
    heartbeat_timeout_ms: int
    def __init__(self, registration_id: _Optional[str] = ..., heartbeat_interval_ms: _Optional[int] = ..., heartbeat_timeout_ms: _Optional[int] = ...) -> None: ...

class TaskManagerRef(_message.Message):
    __slots__ = ("resource_id", "registration_id", "reason")
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    REGISTRATION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    resource_id: str
    registration_id: str
    reason: str
    def __init__(self, resource_id: _Optional[str] = ..., registration_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class SlotReportRequest(_message.Message):
    __slots__ = ("resource_id", "registration_id", "slot_report")
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    REGISTRATION_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_REPORT_FIELD_NUMBER: _ClassVar[int]
    resource_id: str
    registration_id: str
    slot_report: SlotReport
    def __init__(self, resource_id: _Optional[str] = ..., registration_id: _Optional[str] = ..., slot_report: _Optional[_Union[SlotReport, _Mapping]] = ...) -> None: ...

class SlotOffer(_message.Message):
    __slots__ = ("allocation_id", "slot_index")
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_INDEX_FIELD_NUMBER: _ClassVar[int]
    allocation_id: bytes
    slot_index: int
    def __init__(self, allocation_id: _Optional[bytes] = ..., slot_index: _Optional[int] = ...) -> None: ...

class OfferSlotsRequest(_message.Message):
    __slots__ = ("job_id", "resource_id", "taskmanager_address", "data_address", "offers")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    TASKMANAGER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DATA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    OFFERS_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    resource_id: str
    taskmanager_address: str
    data_address: str
    offers: _containers.RepeatedCompositeFieldContainer[SlotOffer]
    def __init__(self, job_id: _Optional[bytes] = ..., resource_id: _Optional[str] = ..., taskmanager_address: _Optional[str] = ..., data_address: _Optional[str] = ..., offers: _Optional[_Iterable[_Union[SlotOffer, _Mapping]]] = ...) -> None: ...

class OfferSlotsResponse(_message.Message):
    __slots__ = ("accepted",)
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, accepted: _Optional[_Iterable[bytes]] = ...) -> None: ...

class TaskExecutionState(_message.Message):
    __slots__ = ("job_id", "execution_attempt_id", "state", "failure", "records_in", "records_out", "metrics")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_IN_FIELD_NUMBER: _ClassVar[int]
    RECORDS_OUT_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    execution_attempt_id: bytes
    state: ExecutionState
    failure: JobFailure
    records_in: int
    records_out: int
    metrics: _containers.ScalarMap[str, float]
    def __init__(self, job_id: _Optional[bytes] = ..., execution_attempt_id: _Optional[bytes] = ..., state: _Optional[_Union[ExecutionState, str]] = ..., failure: _Optional[_Union[JobFailure, _Mapping]] = ..., records_in: _Optional[int] = ..., records_out: _Optional[int] = ..., metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...

class PrintedLinesReport(_message.Message):
    __slots__ = ("job_id", "lines", "dropped")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    lines: _containers.RepeatedScalarFieldContainer[str]
    dropped: int
    def __init__(self, job_id: _Optional[bytes] = ..., lines: _Optional[_Iterable[str]] = ..., dropped: _Optional[int] = ...) -> None: ...

class CollectRequest(_message.Message):
    __slots__ = ("job_id", "execution_attempt_id", "batch")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    execution_attempt_id: bytes
    batch: CollectBatch
    def __init__(self, job_id: _Optional[bytes] = ..., execution_attempt_id: _Optional[bytes] = ..., batch: _Optional[_Union[CollectBatch, _Mapping]] = ...) -> None: ...

class CollectResponse(_message.Message):
    __slots__ = ("accepted",)
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    def __init__(self, accepted: _Optional[bool] = ...) -> None: ...

class OperatorEventToCoordinator(_message.Message):
    __slots__ = ("job_id", "execution_attempt_id", "payload")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    execution_attempt_id: bytes
    payload: bytes
    def __init__(self, job_id: _Optional[bytes] = ..., execution_attempt_id: _Optional[bytes] = ..., payload: _Optional[bytes] = ...) -> None: ...

class AcknowledgeCheckpointRequest(_message.Message):
    __slots__ = ("job_id", "execution_attempt_id", "checkpoint_id", "state_path", "state_size", "sync_duration_ms", "async_duration_ms", "alignment_duration_ms", "start_delay_ms")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_PATH_FIELD_NUMBER: _ClassVar[int]
    STATE_SIZE_FIELD_NUMBER: _ClassVar[int]
    SYNC_DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    ASYNC_DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    ALIGNMENT_DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    START_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    execution_attempt_id: bytes
    checkpoint_id: int
    state_path: str
    state_size: int
    sync_duration_ms: int
    async_duration_ms: int
    alignment_duration_ms: int
    start_delay_ms: int
    def __init__(self, job_id: _Optional[bytes] = ..., execution_attempt_id: _Optional[bytes] = ..., checkpoint_id: _Optional[int] = ..., state_path: _Optional[str] = ..., state_size: _Optional[int] = ..., sync_duration_ms: _Optional[int] = ..., async_duration_ms: _Optional[int] = ..., alignment_duration_ms: _Optional[int] = ..., start_delay_ms: _Optional[int] = ...) -> None: ...

class DeclineCheckpointRequest(_message.Message):
    __slots__ = ("job_id", "execution_attempt_id", "checkpoint_id", "reason", "message")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    execution_attempt_id: bytes
    checkpoint_id: int
    reason: str
    message: str
    def __init__(self, job_id: _Optional[bytes] = ..., execution_attempt_id: _Optional[bytes] = ..., checkpoint_id: _Optional[int] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class RequestSlotRequest(_message.Message):
    __slots__ = ("slot_index", "job_id", "allocation_id", "jobmaster_address", "registration_id")
    SLOT_INDEX_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    JOBMASTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REGISTRATION_ID_FIELD_NUMBER: _ClassVar[int]
    slot_index: int
    job_id: bytes
    allocation_id: bytes
    jobmaster_address: str
    registration_id: str
    def __init__(self, slot_index: _Optional[int] = ..., job_id: _Optional[bytes] = ..., allocation_id: _Optional[bytes] = ..., jobmaster_address: _Optional[str] = ..., registration_id: _Optional[str] = ...) -> None: ...

class ConsumedPartitionDescriptor(_message.Message):
    __slots__ = ("partition_index", "producer_data_address", "producer_attempt_id")
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_DATA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    partition_index: int
    producer_data_address: str
    producer_attempt_id: bytes
    def __init__(self, partition_index: _Optional[int] = ..., producer_data_address: _Optional[str] = ..., producer_attempt_id: _Optional[bytes] = ...) -> None: ...

class ConsumedPartitionGroupDescriptor(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[ConsumedPartitionDescriptor]
    def __init__(self, partitions: _Optional[_Iterable[_Union[ConsumedPartitionDescriptor, _Mapping]]] = ...) -> None: ...

class InputGateDescriptor(_message.Message):
    __slots__ = ("result_id", "target_node_id", "input_index", "ship_strategy", "subpartition_index", "consumed_partition_group")
    RESULT_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_INDEX_FIELD_NUMBER: _ClassVar[int]
    SHIP_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    SUBPARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    CONSUMED_PARTITION_GROUP_FIELD_NUMBER: _ClassVar[int]
    result_id: bytes
    target_node_id: int
    input_index: int
    ship_strategy: str
    subpartition_index: int
    consumed_partition_group: bytes
    def __init__(self, result_id: _Optional[bytes] = ..., target_node_id: _Optional[int] = ..., input_index: _Optional[int] = ..., ship_strategy: _Optional[str] = ..., subpartition_index: _Optional[int] = ..., consumed_partition_group: _Optional[bytes] = ...) -> None: ...

class ResultPartitionDescriptor(_message.Message):
    __slots__ = ("result_id", "partition_index", "num_subpartitions", "partition_type")
    RESULT_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    NUM_SUBPARTITIONS_FIELD_NUMBER: _ClassVar[int]
    PARTITION_TYPE_FIELD_NUMBER: _ClassVar[int]
    result_id: bytes
    partition_index: int
    num_subpartitions: int
    partition_type: _jobgraph_pb2.ResultPartitionType
    def __init__(self, result_id: _Optional[bytes] = ..., partition_index: _Optional[int] = ..., num_subpartitions: _Optional[int] = ..., partition_type: _Optional[_Union[_jobgraph_pb2.ResultPartitionType, str]] = ...) -> None: ...

class TaskDeploymentDescriptor(_message.Message):
    __slots__ = ("job_id", "job_name", "execution_attempt_id", "attempt_number", "allocation_id", "vertex", "subtask_index", "key_group_start", "key_group_end", "execution_config", "artifacts", "input_gates", "produced_partitions", "checkpoint_dir", "restore", "checkpointing_mode")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    VERTEX_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    KEY_GROUP_START_FIELD_NUMBER: _ClassVar[int]
    KEY_GROUP_END_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_CONFIG_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    INPUT_GATES_FIELD_NUMBER: _ClassVar[int]
    PRODUCED_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_DIR_FIELD_NUMBER: _ClassVar[int]
    RESTORE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTING_MODE_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    job_name: str
    execution_attempt_id: bytes
    attempt_number: int
    allocation_id: bytes
    vertex: _jobgraph_pb2.JobVertex
    subtask_index: int
    key_group_start: int
    key_group_end: int
    execution_config: _jobgraph_pb2.ExecutionConfig
    artifacts: _containers.RepeatedCompositeFieldContainer[ArtifactRef]
    input_gates: _containers.RepeatedCompositeFieldContainer[InputGateDescriptor]
    produced_partitions: _containers.RepeatedCompositeFieldContainer[ResultPartitionDescriptor]
    checkpoint_dir: str
    restore: TaskRestore
    checkpointing_mode: str
    def __init__(self, job_id: _Optional[bytes] = ..., job_name: _Optional[str] = ..., execution_attempt_id: _Optional[bytes] = ..., attempt_number: _Optional[int] = ..., allocation_id: _Optional[bytes] = ..., vertex: _Optional[_Union[_jobgraph_pb2.JobVertex, _Mapping]] = ..., subtask_index: _Optional[int] = ..., key_group_start: _Optional[int] = ..., key_group_end: _Optional[int] = ..., execution_config: _Optional[_Union[_jobgraph_pb2.ExecutionConfig, _Mapping]] = ..., artifacts: _Optional[_Iterable[_Union[ArtifactRef, _Mapping]]] = ..., input_gates: _Optional[_Iterable[_Union[InputGateDescriptor, _Mapping]]] = ..., produced_partitions: _Optional[_Iterable[_Union[ResultPartitionDescriptor, _Mapping]]] = ..., checkpoint_dir: _Optional[str] = ..., restore: _Optional[_Union[TaskRestore, _Mapping]] = ..., checkpointing_mode: _Optional[str] = ...) -> None: ...

class TaskRestore(_message.Message):
    __slots__ = ("checkpoint_id", "state_path", "state_size", "finished", "rescaled", "is_rescaled")
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_PATH_FIELD_NUMBER: _ClassVar[int]
    STATE_SIZE_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    RESCALED_FIELD_NUMBER: _ClassVar[int]
    IS_RESCALED_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: int
    state_path: str
    state_size: int
    finished: bool
    rescaled: _containers.RepeatedCompositeFieldContainer[RescaledState]
    is_rescaled: bool
    def __init__(self, checkpoint_id: _Optional[int] = ..., state_path: _Optional[str] = ..., state_size: _Optional[int] = ..., finished: _Optional[bool] = ..., rescaled: _Optional[_Iterable[_Union[RescaledState, _Mapping]]] = ..., is_rescaled: _Optional[bool] = ...) -> None: ...

class RescaledState(_message.Message):
    __slots__ = ("old_subtask_index", "state_path", "state_size", "take_operator_state")
    OLD_SUBTASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    STATE_PATH_FIELD_NUMBER: _ClassVar[int]
    STATE_SIZE_FIELD_NUMBER: _ClassVar[int]
    TAKE_OPERATOR_STATE_FIELD_NUMBER: _ClassVar[int]
    old_subtask_index: int
    state_path: str
    state_size: int
    take_operator_state: bool
    def __init__(self, old_subtask_index: _Optional[int] = ..., state_path: _Optional[str] = ..., state_size: _Optional[int] = ..., take_operator_state: _Optional[bool] = ...) -> None: ...

class SubmitTaskRequest(_message.Message):
    __slots__ = ("tdd",)
    TDD_FIELD_NUMBER: _ClassVar[int]
    tdd: TaskDeploymentDescriptor
    def __init__(self, tdd: _Optional[_Union[TaskDeploymentDescriptor, _Mapping]] = ...) -> None: ...

class CancelTaskRequest(_message.Message):
    __slots__ = ("execution_attempt_id",)
    EXECUTION_ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    execution_attempt_id: bytes
    def __init__(self, execution_attempt_id: _Optional[bytes] = ...) -> None: ...

class FreeSlotRequest(_message.Message):
    __slots__ = ("allocation_id", "cause")
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    allocation_id: bytes
    cause: str
    def __init__(self, allocation_id: _Optional[bytes] = ..., cause: _Optional[str] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("sender", "job_id", "registration_id")
    SENDER_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REGISTRATION_ID_FIELD_NUMBER: _ClassVar[int]
    sender: str
    job_id: bytes
    registration_id: str
    def __init__(self, sender: _Optional[str] = ..., job_id: _Optional[bytes] = ..., registration_id: _Optional[str] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("slot_report", "tasks", "resources")
    SLOT_REPORT_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    slot_report: SlotReport
    tasks: _containers.RepeatedCompositeFieldContainer[TaskExecutionState]
    resources: TaskManagerResources
    def __init__(self, slot_report: _Optional[_Union[SlotReport, _Mapping]] = ..., tasks: _Optional[_Iterable[_Union[TaskExecutionState, _Mapping]]] = ..., resources: _Optional[_Union[TaskManagerResources, _Mapping]] = ...) -> None: ...

class TaskManagerResources(_message.Message):
    __slots__ = ("cpu_cores", "physical_memory_bytes", "available_memory_bytes", "process_rss_bytes", "process_tree_rss_bytes", "heartbeats_received", "running_tasks")
    CPU_CORES_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROCESS_RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROCESS_TREE_RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    HEARTBEATS_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    RUNNING_TASKS_FIELD_NUMBER: _ClassVar[int]
    cpu_cores: int
    physical_memory_bytes: int
    available_memory_bytes: int
    process_rss_bytes: int
    process_tree_rss_bytes: int
    heartbeats_received: int
    running_tasks: int
    def __init__(self, cpu_cores: _Optional[int] = ..., physical_memory_bytes: _Optional[int] = ..., available_memory_bytes: _Optional[int] = ..., process_rss_bytes: _Optional[int] = ..., process_tree_rss_bytes: _Optional[int] = ..., heartbeats_received: _Optional[int] = ..., running_tasks: _Optional[int] = ...) -> None: ...

class ThreadDumpResponse(_message.Message):
    __slots__ = ("threads",)
    class Thread(_message.Message):
        __slots__ = ("name", "stack")
        NAME_FIELD_NUMBER: _ClassVar[int]
        STACK_FIELD_NUMBER: _ClassVar[int]
        name: str
        stack: str
        def __init__(self, name: _Optional[str] = ..., stack: _Optional[str] = ...) -> None: ...
    THREADS_FIELD_NUMBER: _ClassVar[int]
    threads: _containers.RepeatedCompositeFieldContainer[ThreadDumpResponse.Thread]
    def __init__(self, threads: _Optional[_Iterable[_Union[ThreadDumpResponse.Thread, _Mapping]]] = ...) -> None: ...

class LookupPartitionRequest(_message.Message):
    __slots__ = ("producer_attempt_id",)
    PRODUCER_ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    producer_attempt_id: bytes
    def __init__(self, producer_attempt_id: _Optional[bytes] = ...) -> None: ...

class LookupPartitionResponse(_message.Message):
    __slots__ = ("state", "address")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        PENDING: _ClassVar[LookupPartitionResponse.State]
        READY: _ClassVar[LookupPartitionResponse.State]
        GONE: _ClassVar[LookupPartitionResponse.State]
    PENDING: LookupPartitionResponse.State
    READY: LookupPartitionResponse.State
    GONE: LookupPartitionResponse.State
    STATE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    state: LookupPartitionResponse.State
    address: str
    def __init__(self, state: _Optional[_Union[LookupPartitionResponse.State, str]] = ..., address: _Optional[str] = ...) -> None: ...

class TriggerCheckpointRequest(_message.Message):
    __slots__ = ("execution_attempt_id", "checkpoint_id", "timestamp_ms", "stop", "drain", "savepoint")
    EXECUTION_ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    SAVEPOINT_FIELD_NUMBER: _ClassVar[int]
    execution_attempt_id: bytes
    checkpoint_id: int
    timestamp_ms: int
    stop: bool
    drain: bool
    savepoint: bool
    def __init__(self, execution_attempt_id: _Optional[bytes] = ..., checkpoint_id: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., stop: _Optional[bool] = ..., drain: _Optional[bool] = ..., savepoint: _Optional[bool] = ...) -> None: ...

class OperatorEventToTask(_message.Message):
    __slots__ = ("execution_attempt_id", "payload")
    EXECUTION_ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    execution_attempt_id: bytes
    payload: bytes
    def __init__(self, execution_attempt_id: _Optional[bytes] = ..., payload: _Optional[bytes] = ...) -> None: ...

class CheckpointNotification(_message.Message):
    __slots__ = ("execution_attempt_id", "checkpoint_id", "aborted")
    EXECUTION_ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    ABORTED_FIELD_NUMBER: _ClassVar[int]
    execution_attempt_id: bytes
    checkpoint_id: int
    aborted: bool
    def __init__(self, execution_attempt_id: _Optional[bytes] = ..., checkpoint_id: _Optional[int] = ..., aborted: _Optional[bool] = ...) -> None: ...

class TaskOutputRequest(_message.Message):
    __slots__ = ("execution_attempt_id",)
    EXECUTION_ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    execution_attempt_id: bytes
    def __init__(self, execution_attempt_id: _Optional[bytes] = ...) -> None: ...

class TaskOutputResponse(_message.Message):
    __slots__ = ("found", "lines", "dropped_lines")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    DROPPED_LINES_FIELD_NUMBER: _ClassVar[int]
    found: bool
    lines: _containers.RepeatedScalarFieldContainer[str]
    dropped_lines: int
    def __init__(self, found: _Optional[bool] = ..., lines: _Optional[_Iterable[str]] = ..., dropped_lines: _Optional[int] = ...) -> None: ...

class LogFileInfo(_message.Message):
    __slots__ = ("name", "size", "mtime_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    MTIME_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    size: int
    mtime_ms: int
    def __init__(self, name: _Optional[str] = ..., size: _Optional[int] = ..., mtime_ms: _Optional[int] = ...) -> None: ...

class LogFileList(_message.Message):
    __slots__ = ("files", "log_name", "stdout_name")
    FILES_FIELD_NUMBER: _ClassVar[int]
    LOG_NAME_FIELD_NUMBER: _ClassVar[int]
    STDOUT_NAME_FIELD_NUMBER: _ClassVar[int]
    files: _containers.RepeatedCompositeFieldContainer[LogFileInfo]
    log_name: str
    stdout_name: str
    def __init__(self, files: _Optional[_Iterable[_Union[LogFileInfo, _Mapping]]] = ..., log_name: _Optional[str] = ..., stdout_name: _Optional[str] = ...) -> None: ...

class ReadLogRequest(_message.Message):
    __slots__ = ("name", "stdout", "max_bytes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    stdout: bool
    max_bytes: int
    def __init__(self, name: _Optional[str] = ..., stdout: _Optional[bool] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class ReadLogResponse(_message.Message):
    __slots__ = ("found", "text", "message")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    found: bool
    text: str
    message: str
    def __init__(self, found: _Optional[bool] = ..., text: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class TaskOutputsRequest(_message.Message):
    __slots__ = ("job_id", "vertex", "subtask")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    VERTEX_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    vertex: str
    subtask: int
    def __init__(self, job_id: _Optional[bytes] = ..., vertex: _Optional[str] = ..., subtask: _Optional[int] = ...) -> None: ...

class SubtaskOutput(_message.Message):
    __slots__ = ("vertex_id", "vertex_name", "subtask_index", "parallelism", "attempt_number", "state", "taskmanager_id", "available", "unavailable_reason", "lines", "dropped_lines")
    VERTEX_ID_FIELD_NUMBER: _ClassVar[int]
    VERTEX_NAME_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TASKMANAGER_ID_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_REASON_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    DROPPED_LINES_FIELD_NUMBER: _ClassVar[int]
    vertex_id: str
    vertex_name: str
    subtask_index: int
    parallelism: int
    attempt_number: int
    state: str
    taskmanager_id: str
    available: bool
    unavailable_reason: str
    lines: _containers.RepeatedScalarFieldContainer[str]
    dropped_lines: int
    def __init__(self, vertex_id: _Optional[str] = ..., vertex_name: _Optional[str] = ..., subtask_index: _Optional[int] = ..., parallelism: _Optional[int] = ..., attempt_number: _Optional[int] = ..., state: _Optional[str] = ..., taskmanager_id: _Optional[str] = ..., available: _Optional[bool] = ..., unavailable_reason: _Optional[str] = ..., lines: _Optional[_Iterable[str]] = ..., dropped_lines: _Optional[int] = ...) -> None: ...

class TaskOutputsResponse(_message.Message):
    __slots__ = ("job_name", "subtasks")
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    SUBTASKS_FIELD_NUMBER: _ClassVar[int]
    job_name: str
    subtasks: _containers.RepeatedCompositeFieldContainer[SubtaskOutput]
    def __init__(self, job_name: _Optional[str] = ..., subtasks: _Optional[_Iterable[_Union[SubtaskOutput, _Mapping]]] = ...) -> None: ...
