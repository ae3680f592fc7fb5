#!/usr/bin/env bash
# kill -9 of a TaskManager during a running keyed job: seconds from the kill until the job is FAILED.
# Usage: bench/kill_taskmanager.sh  (a session cluster of its own on port 6123, 3 runs; ~2 minutes)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
M="$root/.venv/bin/millstream"
work=$(mktemp -d)
export MILLSTREAM_CLUSTER_DIR="$work/cluster"
cat > "$work/job.py" <<'JOB'
import time
from millstream.datastream import SourceFunction, StreamExecutionEnvironment

class Ticks(SourceFunction):
    def __init__(self):
        self.running = True

    def run(self, ctx):
        i = 0
        while self.running:
            ctx.collect(i)
            i += 1
            time.sleep(0.001)

    def cancel(self):
        self.running = False

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(4)
env.add_source(Ticks()).key_by(lambda x: x % 10).map(lambda x: x * 2).add_sink(lambda x: None)
env.execute("kill a TaskManager")
JOB
status() { "$M" list 2>/dev/null | awk 'NR==1 {print $2}'; }
for delay in 3 6 10; do
  "$M" cluster start --taskmanagers 2 --slots 2 >/dev/null
  (MILLSTREAM_JOBMANAGER=localhost:6123 "$root/.venv/bin/python" "$work/job.py" >/dev/null 2>&1 &)
  for _ in $(seq 1 120); do [ "$(status)" = RUNNING ] && break; sleep 0.5; done
  sleep "$delay"
  victim=$("$root/.venv/bin/python" -c "import json,sys; print(json.load(open(sys.argv[1]))['processes'][2]['pid'])" "$MILLSTREAM_CLUSTER_DIR/cluster.json")
  kill -9 "$victim"; t0=$(date +%s.%N)
  for _ in $(seq 1 600); do [ "$(status)" = FAILED ] && break; sleep 0.1; done
  echo "kill -9 ${delay} s after RUNNING: FAILED after $(echo "$(date +%s.%N) - $t0" | bc) s"
  "$M" cluster stop >/dev/null
done
rm -rf "$work"
