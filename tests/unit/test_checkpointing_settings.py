"""A job's checkpoint settings: enable_checkpointing, then the job's configuration, then the cluster's."""
from __future__ import annotations

import tempfile

import pytest

from millstream.jobmanager.checkpoint.settings import checkpoint_options_of, checkpointing_for_job
from millstream.proto import jobgraph_pb2 as pb
from millstream.runtime import config as cfg
from millstream.runtime.restart_strategy import ExponentialDelay, NoRestart, spec_for_job


def graph(interval_ms: int = 0, mode: str = "EXACTLY_ONCE", runtime_mode: int = pb.STREAMING, **conf: str) -> pb.JobGraph:
    g = pb.JobGraph(job_id=b"j" * 16)
    g.execution_config.runtime_mode = runtime_mode  # type: ignore[assignment]
    g.execution_config.checkpoint_interval_ms = interval_ms
    g.execution_config.checkpointing_mode = mode
    g.execution_config.configuration.update(conf)
    return g


def cluster(**values: object) -> dict[str, object]:
    conf = cfg.Configuration.from_dict({k.replace("__", "."): v for k, v in values.items()})
    return checkpoint_options_of(conf)


def test_no_checkpoints_unless_enabled() -> None:
    assert checkpointing_for_job(graph(), cluster()) is None


def test_enable_checkpointing_in_the_job() -> None:
    job = checkpointing_for_job(graph(500), cluster())
    assert job is not None
    assert job.settings.interval_ms == 500
    assert job.settings.timeout_ms == 600_000 and job.settings.min_pause_ms == 0
    assert job.settings.tolerable_failed_checkpoints == 0 and job.num_retained == 1
    assert job.mode == "EXACTLY_ONCE"
    assert str(job.directory) == f"{tempfile.gettempdir()}/millstream-checkpoints"


def test_the_cluster_interval_enables_checkpoints_and_the_default_restart_strategy() -> None:
    options = cluster(**{"execution.checkpointing.interval": "2 s", "execution.checkpointing.mode": "at-least-once"})
    job = checkpointing_for_job(graph(), options)
    assert job is not None and job.settings.interval_ms == 2000 and job.mode == "AT_LEAST_ONCE"
    assert spec_for_job(graph(), {}, checkpointing_enabled=True) == ExponentialDelay()
    assert spec_for_job(graph(), {}) == NoRestart()


def test_cluster_options_are_read() -> None:
    options = cluster(**{
        "execution.checkpointing.timeout": "5 s",
        "execution.checkpointing.min-pause": "100 ms",
        "execution.checkpointing.tolerable-failed-checkpoints": 3,
        "execution.checkpointing.dir": "file:///data/chk",
        "execution.checkpointing.num-retained": 2,
    })
    job = checkpointing_for_job(graph(1000), options)
    assert job is not None
    assert (job.settings.timeout_ms, job.settings.min_pause_ms, job.settings.tolerable_failed_checkpoints) == (5000, 100, 3)
    assert str(job.directory) == "/data/chk" and job.num_retained == 2


def test_the_jobs_configuration_wins_over_the_cluster() -> None:
    options = cluster(**{"execution.checkpointing.dir": "/cluster/chk", "execution.checkpointing.interval": "10 s"})
    job = checkpointing_for_job(graph(**{"execution.checkpointing.dir": "/job/chk",
                                         "execution.checkpointing.interval": "300 ms",
                                         "state.checkpoints.num-retained": "3"}), options)
    assert job is not None
    assert str(job.directory) == "/job/chk" and job.settings.interval_ms == 300 and job.num_retained == 3


def test_batch_jobs_take_no_checkpoints() -> None:
    assert checkpointing_for_job(graph(500, runtime_mode=pb.BATCH), cluster()) is None


@pytest.mark.parametrize(("conf", "message"), [
    ({"execution.checkpointing.dir": "relative/dir"}, "not absolute"),
    ({"execution.checkpointing.dir": "s3://bucket/x"}, "scheme 's3' is not supported"),
    ({"execution.checkpointing.num-retained": "0"}, "num-retained must be at least 1"),
    ({"execution.checkpointing.timeout": "soon"}, "execution.checkpointing.timeout"),
])
def test_bad_values_are_refused_naming_them(conf: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        checkpointing_for_job(graph(500, **conf), cluster())


def test_a_savepoint_to_resume_from_and_the_default_savepoint_directory() -> None:
    options = cluster(**{"execution.checkpointing.savepoint-dir": "/savepoints"})
    job = checkpointing_for_job(graph(500, **{"execution.savepoint.path": "/savepoints/savepoint-1",
                                              "execution.savepoint.ignore-unclaimed-state": "true"}), options)
    assert job is not None
    assert str(job.savepoint_path) == "/savepoints/savepoint-1" and job.ignore_unclaimed_state
    assert str(job.savepoint_dir) == "/savepoints"
    plain = checkpointing_for_job(graph(500), cluster())
    assert plain is not None and plain.savepoint_path is None and plain.savepoint_dir is None


def test_resuming_from_a_savepoint_needs_checkpointing() -> None:
    with pytest.raises(ValueError, match="needs checkpointing"):
        checkpointing_for_job(graph(**{"execution.savepoint.path": "/savepoints/savepoint-1"}), cluster())


def test_externalized_checkpoint_retention_decides_what_the_jobs_end_deletes() -> None:
    # Flink's ExternalizedCheckpointRetention: a finished job's checkpoints always go; a cancelled
    # job's stay only under RETAIN_ON_CANCELLATION; a failed job's go only under NO_EXTERNALIZED_CHECKPOINTS
    from millstream.jobmanager.checkpoint.settings import deletes_checkpoints

    table = {
        "DELETE_ON_CANCELLATION": {"FINISHED": True, "CANCELED": True, "FAILED": False},
        "RETAIN_ON_CANCELLATION": {"FINISHED": True, "CANCELED": False, "FAILED": False},
        "NO_EXTERNALIZED_CHECKPOINTS": {"FINISHED": True, "CANCELED": True, "FAILED": True},
    }
    for retention, by_status in table.items():
        for status, deleted in by_status.items():
            assert deletes_checkpoints(retention, status) is deleted, (retention, status)
    with pytest.raises(ValueError, match="not a terminal job status"):
        deletes_checkpoints("RETAIN_ON_CANCELLATION", "RUNNING")


def test_the_retention_comes_from_the_job_then_the_cluster() -> None:
    key = "execution.checkpointing.externalized-checkpoint-retention"
    job = checkpointing_for_job(graph(1000), cluster())
    assert job is not None and job.retention == "NO_EXTERNALIZED_CHECKPOINTS"  # Flink 2's default
    job = checkpointing_for_job(graph(1000), cluster(**{key: "DELETE_ON_CANCELLATION"}))
    assert job is not None and job.retention == "DELETE_ON_CANCELLATION"
    job = checkpointing_for_job(graph(1000, **{key: "RETAIN_ON_CANCELLATION"}), cluster(**{key: "DELETE_ON_CANCELLATION"}))
    assert job is not None and job.retention == "RETAIN_ON_CANCELLATION"
    with pytest.raises(ValueError, match="externalized-checkpoint-retention"):
        checkpointing_for_job(graph(1000, **{key: "KEEP_FOREVER"}), cluster())


def test_a_job_asking_for_unaligned_checkpoints_is_noted_and_its_checkpoints_stay_aligned() -> None:
    from millstream.jobmanager.checkpoint.settings import unaligned_checkpoints_warning

    key = "execution.checkpointing.unaligned.enabled"
    job = checkpointing_for_job(graph(1000), cluster())
    assert job is not None and not job.unaligned_requested
    job = checkpointing_for_job(graph(1000, **{key: "true"}), cluster())
    assert job is not None and job.unaligned_requested and job.mode == "EXACTLY_ONCE"
    job = checkpointing_for_job(graph(1000), cluster(**{key: "true"}))  # the cluster's setting counts too
    assert job is not None and job.unaligned_requested
    job = checkpointing_for_job(graph(1000, **{key: "false"}), cluster(**{key: "true"}))  # the job's wins
    assert job is not None and not job.unaligned_requested
    # Flink aligns nothing in AT_LEAST_ONCE mode, so there is nothing unaligned to ask for there
    job = checkpointing_for_job(graph(1000, mode="AT_LEAST_ONCE", **{key: "true"}), cluster())
    assert job is not None and not job.unaligned_requested
    assert checkpointing_for_job(graph(0, **{key: "true"}), cluster()) is None
    text = unaligned_checkpoints_warning("wc", "ab12")
    assert "ab12" in text and "'wc'" in text and key in text and "stay aligned" in text
    assert "Exactly-once is unaffected" in text and "back-pressure" in text
