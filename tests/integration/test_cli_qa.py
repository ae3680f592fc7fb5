"""The CLI as a process: its output into a closed pipe (the pure CLI rules are
tests/unit/test_cli_qa.py)."""
from __future__ import annotations

import subprocess
import sys
import textwrap


def test_output_into_a_closed_pipe_is_not_a_traceback(tmp_path) -> None:
    # `millstream list --json | head` : the reader leaves early; Python's own advice is to exit quietly
    script = tmp_path / "job.py"
    script.write_text(JOB)
    proc = subprocess.Popen([sys.executable, "-m", "millstream.client.cli", "plan", str(script), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before anything is written
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


JOB = textwrap.dedent("""
    from millstream.datastream import StreamExecutionEnvironment

    print("Executing with the default input data set.")  # as PyFlink's examples do
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1, 2, 3]).map(lambda x: x + 1).print()
    env.execute("printing script")
""")
