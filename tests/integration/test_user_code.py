"""A script's function fails with its file, line and source where the file is gone, in another
process (tests/unit/test_user_code.py has the rest)."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def test_a_scripts_function_fails_with_its_file_line_and_source_where_the_file_is_gone(tmp_path) -> None:
    payload, script = _pickled_by_a_script(tmp_path)
    script.unlink()  # as on a TaskManager host that never had the job script
    shown = subprocess.run([sys.executable, "-c", LOADER], input=payload, capture_output=True, check=True).stderr.decode()
    assert "<dynamic-code>" not in shown
    assert f'File "{script}", line 8, in explode' in shown
    assert "return [x / (offset - 1) for _ in range(1)]  # line 8" in shown

LOADER = textwrap.dedent("""
    import pickle, sys, traceback
    fn = pickle.loads(sys.stdin.buffer.read())
    try:
        fn(3)
    except ZeroDivisionError:
        traceback.print_exc()
""")


def _pickled_by_a_script(tmp_path: Path) -> tuple[bytes, Path]:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, check=True)
    return out.stdout, script

SCRIPT = textwrap.dedent("""
    import sys
    from millstream.runtime import user_code


    def explode(x):
        offset = 1
        return [x / (offset - 1) for _ in range(1)]  # line 8: a comprehension, a nested code object


    sys.stdout.buffer.write(user_code.dumps(explode))
""")
