"""runtime.user_code: a user function pickled by value keeps its file name and carries its source,
so its traceback where it runs names the user's file, line and source line (cloudpickle alone
writes ``<dynamic-code>`` and no line)."""
from __future__ import annotations

import pickle


import cloudpickle

from millstream.runtime import user_code


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
