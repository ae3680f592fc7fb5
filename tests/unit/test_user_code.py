"""runtime.user_code: a user function pickled by value keeps its file name and carries its source,
so its traceback where it runs names the user's file, line and source line (cloudpickle alone
writes ``<dynamic-code>`` and no line)."""
from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import cloudpickle

from millstream.runtime import user_code

SCRIPT = textwrap.dedent("""
    import sys
    from millstream.runtime import user_code


    def explode(x):
        offset = 1
        return [x / (offset - 1) for _ in range(1)]  # line 8: a comprehension, a nested code object


    sys.stdout.buffer.write(user_code.dumps(explode))
""")

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


def test_a_scripts_function_fails_with_its_file_line_and_source_where_the_file_is_gone(tmp_path) -> None:
    payload, script = _pickled_by_a_script(tmp_path)
    script.unlink()  # as on a TaskManager host that never had the job script
    shown = subprocess.run([sys.executable, "-c", LOADER], input=payload, capture_output=True, check=True).stderr.decode()
    assert "<dynamic-code>" not in shown
    assert f'File "{script}", line 8, in explode' in shown
    assert "return [x / (offset - 1) for _ in range(1)]  # line 8" in shown


def test_plain_cloudpickle_loses_the_file_name(tmp_path) -> None:
    """The cause this module exists for: if cloudpickle starts keeping file names, it can go."""
    namespace: dict = {}
    exec(compile("def f(x):\n    return 1 / x\n", str(tmp_path / "job.py"), "exec"), namespace)
    namespace["f"].__module__ = "__main__"
    namespace["f"].__qualname__ = "f_not_importable"
    assert pickle.loads(cloudpickle.dumps(namespace["f"])).__code__.co_filename == "<dynamic-code>"
    assert pickle.loads(user_code.dumps(namespace["f"])).__code__.co_filename == str(tmp_path / "job.py")


def test_the_source_travels_once_per_file(tmp_path) -> None:
    source = "def f(x):\n    return x\n\ndef g(x):\n    return x\n" + "# padding\n" * 2000
    path = tmp_path / "big_job.py"
    path.write_text(source)
    namespace: dict = {"__name__": "__main__"}
    exec(compile(source, str(path), "exec"), namespace)
    one, both = user_code.dumps(namespace["f"]), user_code.dumps((namespace["f"], namespace["g"]))
    assert len(source) < len(one) and len(both) < len(one) + len(source) // 2
