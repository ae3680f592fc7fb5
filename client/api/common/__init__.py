"""Common types of the user API, at PyFlink's ``pyflink.common`` path."""
from millstream.common.completable_future import CompletableFuture
from millstream.common.configuration import Configuration
from millstream.common.execution_config import ExecutionConfig
from millstream.common.job_client import JobClient
from millstream.common.job_execution_result import JobExecutionResult
from millstream.common.job_id import JobID
from millstream.common.job_status import JobStatus
from millstream.common.restart_strategy import RestartStrategies, RestartStrategyConfiguration
from millstream.common.row import Row, RowKind
from millstream.common.serialization import (
    ByteArraySchema,
    DeserializationSchema,
    Encoder,
    SerializationSchema,
    SimpleStringSchema,
)
from millstream.common.time import Duration, Instant, Time
from millstream.common.typeinfo import TypeInformation, Types
from millstream.common.watermark_strategy import TimestampAssigner, WatermarkStrategy

__all__ = [
    "ByteArraySchema",
    "CompletableFuture",
    "Configuration",
    "DeserializationSchema",
    "Duration",
    "Encoder",
    "ExecutionConfig",
    "JobClient",
    "JobExecutionResult",
    "JobID",
    "JobStatus",
    "RestartStrategies",
    "RestartStrategyConfiguration",
    "Row",
    "RowKind",
    "SerializationSchema",
    "SimpleStringSchema",
    "Time",
    "Instant",
    "TimestampAssigner",
    "TypeInformation",
    "Types",
    "WatermarkStrategy",
]
