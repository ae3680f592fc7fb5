"""Vertex and edge ids are identical in processes with different hash seeds (the graph's rules are
tests/unit/test_job_graph.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap


def test_ids_identical_across_processes_with_different_hash_seeds():
    outputs = []
    for seed in ("0", "1", "4242"):
        proc = subprocess.run(
            [sys.executable, "-c", _SUBPROCESS_SCRIPT],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        outputs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert outputs[0]["vertices"], "no vertices printed"
    assert outputs[0] == outputs[1] == outputs[2]

_SUBPROCESS_SCRIPT = textwrap.dedent(
    """
    import json
    from millstream.datastream import StreamExecutionEnvironment
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    src = env.from_collection(["a", "b", "c"]).name("numbers")
    src.map(lambda x: x).name("M").key_by(lambda w: w).reduce(lambda a, b: a + b).name("R").print()
    env.from_sequence(1, 5).filter(lambda x: x > 2).rebalance().print().name("other")
    env.from_collection(["x"]).name("with-uid").uid("source-uid").map(lambda s: s).uid("map-uid").print()
    side = env.from_collection([{"k": 1}, {"z": 2}]).name("dicts")
    side.map(lambda d: sorted(d)).name("keys").union(side.map(lambda d: [1]).name("ones")).print().name("u")
    jg = env.get_job_graph("same-everywhere")
    print(json.dumps({
        "vertices": [(v["name"], v["id"]) for v in jg.to_dict()["vertices"]],
        "operators": sorted((v.name, o.name, o.operator_id.hex()) for v in jg.proto.vertices for o in v.operators),
    }))
    """
)
