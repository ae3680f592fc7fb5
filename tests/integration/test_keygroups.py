"""Key groups are identical in processes with different hash seeds (the key group rules are
tests/unit/test_keygroups.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def test_key_groups_are_identical_across_processes_with_different_hash_seeds() -> None:
    first, second = _run_with_hash_seed("1"), _run_with_hash_seed("2")
    assert first[0] != second[0]  # Python's own str hash really differs between the two processes
    assert first[1:] == second[1:]
    assert first[1] == "none 0"
    assert len(first) == 2 + 19


def _run_with_hash_seed(seed: str) -> list[str]:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    out = subprocess.run(
        [sys.executable, "-c", _STABILITY_SCRIPT], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return out.stdout.splitlines()

_STABILITY_SCRIPT = textwrap.dedent(
    """
    import datetime, decimal, enum, fractions
    from millstream.runtime.keygroups import assign_to_key_group, java_hash_code

    class Color(enum.Enum):
        RED = "red"

    keys = ["hello", "ünïcode-\U0001f600", "", 7, -2**40, 2**70, 3.5, -0.0, b"\\x00\\xff", True,
            ("user", 42, None), ["a", ("b", 1.5)], frozenset({"x", "y", "z", "w"}),
            {"k1": "v1", "k2": "v2"}, {"s", "t", "u"}, fractions.Fraction(2, 3),
            decimal.Decimal("1.10"), datetime.date(2024, 2, 29), Color.RED]
    print("salted", hash("a salted str"))
    print("none", java_hash_code(None))
    for key in keys:
        print(repr(key) if not isinstance(key, (set, frozenset, dict)) else type(key).__name__,
              assign_to_key_group(key, 128), assign_to_key_group(key, 32768))
    """
)
