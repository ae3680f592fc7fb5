"""Common types of the user API, at PyFlink's ``pyflink.common`` path."""
from millstream.common.configuration import Configuration
from millstream.common.execution_config import ExecutionConfig
from millstream.common.job_execution_result import JobExecutionResult
from millstream.common.restart_strategy import RestartStrategies, RestartStrategyConfiguration
from millstream.common.row import Row, RowKind
from millstream.common.serialization import Encoder
from millstream.common.time import Duration, Time
from millstream.common.typeinfo import TypeInformation, Types
from millstream.common.watermark_strategy import TimestampAssigner, WatermarkStrategy

__all__ = [
    "Configuration",
    "Duration",
    "Encoder",
    "ExecutionConfig",
    "JobExecutionResult",
    "RestartStrategies",
    "RestartStrategyConfiguration",
    "Row",
    "RowKind",
    "Time",
    "TimestampAssigner",
    "TypeInformation",
    "Types",
    "WatermarkStrategy",
]
