"""The option registry's table printed by python -m millstream.runtime.config (a process; the
registry's rules are tests/unit/test_config.py)."""
from __future__ import annotations

import subprocess
import sys

from millstream.runtime import config as c


def test_module_main_prints_the_table() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "millstream.runtime.config"], capture_output=True, text=True,
        timeout=60, check=True)
    assert result.stdout == c.render_markdown_table()
