"""The layering seen from a fresh interpreter (test_layout checks the imports as written; these run
them): the engine loads no stream class, and the lazy ``millstream.datastream`` is PyFlink's package."""
from __future__ import annotations

import subprocess
import sys

from tests.unit.test_layout import STREAM_CLASSES


def test_the_engine_loads_no_stream_class_and_no_client() -> None:
    """Importing the engine's modules (the ones that import the API's value modules) in a fresh
    interpreter loads neither DataStream, StreamExecutionEnvironment nor the client."""
    engine = ["millstream.runtime.operators", "millstream.runtime.state.heap_backend", "millstream.runtime.task.chain",
              "millstream.taskmanager.taskmanager", "millstream.jobmanager.jobmanager"]
    code = (f"import sys\nfor m in {engine!r}: __import__(m)\n"
            f"print(sorted(m for m in sys.modules if m.startswith({STREAM_CLASSES!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_lazy_datastream_package_behaves_as_pyflinks_eager_one() -> None:
    """``millstream.datastream`` loads its names on first use, yet a program sees PyFlink's package:
    every exported name, its submodules as attributes, no attribute for what does not exist."""
    code = (
        "import sys\n"
        "import millstream.datastream as d\n"
        "assert 'millstream.datastream.data_stream' not in sys.modules\n"
        "ns = {}\n"
        "exec('from millstream.datastream import *', ns)\n"
        "from millstream.datastream.data_stream import DataStream\n"
        "from millstream.datastream.functions import MapFunction\n"
        "assert ns['DataStream'] is DataStream and ns['MapFunction'] is MapFunction\n"
        "assert set(d.__all__) <= set(ns) and set(d.__all__) <= set(dir(d))\n"
        "assert d.window.TimeWindow is ns['TimeWindow']\n"
        "assert not hasattr(d, 'no_such_name') and not hasattr(d, 'checkpointing_mode')\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr
