"""Key groups of container keys do not depend on the hash seed of the process
(tests/unit/test_keys.py has the rest)."""
from __future__ import annotations

import os
import subprocess
import sys


def test_key_groups_of_container_keys_do_not_depend_on_the_hash_seed() -> None:
    code = ("from millstream.runtime.keygroups import assign_to_key_group as a;"
            "print([a(k, 32768) for k in (['a', 'b'], {'x': 'y'}, {'s', 't', 'u'}, frozenset({'v'}))])")
    outputs = {
        subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed},
                       capture_output=True, text=True, check=True).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outputs) == 1, outputs
