"""A mini-cluster that fails to start raises the failure itself, on every Python the package
supports (requires-python >= 3.10): the pointer to Spark's output file is a note where exceptions
have notes (3.11+), and is never a reason to replace the failure (3.10 has no ``add_note``)."""
from __future__ import annotations

import sys

import pytest

from millstream.client.minicluster import MiniCluster
from millstream.runtime import config as cfg


def test_a_start_failure_propagates_itself_with_the_spark_output_file_noted_where_python_has_notes(tmp_path) -> None:
    spark_output = str(tmp_path / "spark.err")
    cluster = MiniCluster(cfg.Configuration(), 1, jvm_stderr=spark_output)
    try:
        with pytest.raises(ValueError, match="no Spark") as raised:
            with cluster._noting_spark_output():
                raise ValueError("no Spark")
    finally:
        cluster._loop.close()
    notes = getattr(raised.value, "__notes__", [])
    assert notes == ([f"Spark's output: {spark_output}"] if sys.version_info >= (3, 11) else [])
