"""Slow check (not in `make test`): run a three-execute program N times, count crashed processes.

    python bench/multi_execute.py [runs=100]

Each run is a fresh interpreter using the embedded cluster; a run "crashes" when it dies of a
signal (SIGABRT, SIGSEGV...) or exits non-zero. Prints one line per run and a summary.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time

PROGRAM = """
from millstream.datastream import StreamExecutionEnvironment

for i in range(3):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.from_sequence(1, 1000).key_by(lambda x: x % 3).sum(0).add_sink(lambda x: None)
    env.execute(f"job {i}")
print("OK")
"""


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    env = {k: v for k, v in os.environ.items() if k != "MILLSTREAM_JOBMANAGER"}
    crashes = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "three_executes.py")
        with open(path, "w") as f:
            f.write(PROGRAM)
        for i in range(runs):
            started = time.monotonic()
            run = subprocess.run([sys.executable, path], cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
            ok = run.returncode == 0 and "OK" in run.stdout
            crashes += not ok
            code = run.returncode
            how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
            print(f"run {i + 1}/{runs}: {'ok' if ok else 'CRASH'} ({how}, {time.monotonic() - started:.1f} s)", flush=True)
            if not ok:
                print(run.stderr[-2000:], flush=True)
    print(f"{crashes} crashed of {runs} runs", flush=True)
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
