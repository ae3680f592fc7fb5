"""Keyed state: per-sensor running statistics with ValueState and MapState (`python examples/state_access.py`).

Each reading is ``(sensor, celsius)``. A KeyedProcessFunction keeps, per sensor, the number of
readings and their sum in a ValueState, and how often each rounded value was seen in a MapState;
it emits the running mean and the most frequent value so far. A sensor silent for an hour starts
over: its statistics have a time-to-live (StateTtlConfig, as in PyFlink's state_access example).
"""
from __future__ import annotations

from millstream.common import Time, Types
from millstream.datastream import KeyedProcessFunction, RuntimeContext, StreamExecutionEnvironment
from millstream.datastream.state import MapStateDescriptor, StateTtlConfig, ValueStateDescriptor

READINGS = [("kitchen", 21.5), ("attic", 30.0), ("kitchen", 22.5), ("kitchen", 21.6), ("attic", 28.0), ("cellar", 12.0)]


class RunningStats(KeyedProcessFunction):
    def open(self, runtime_context: RuntimeContext) -> None:
        ttl = StateTtlConfig.new_builder(Time.hours(1)).update_ttl_on_create_and_write().build()
        count_and_sum = ValueStateDescriptor("count_and_sum", Types.TUPLE([Types.INT(), Types.DOUBLE()]))
        count_and_sum.enable_time_to_live(ttl)
        seen = MapStateDescriptor("seen", Types.INT(), Types.INT())
        seen.enable_time_to_live(ttl)  # per entry: each rounded value expires on its own
        self.count_and_sum = runtime_context.get_state(count_and_sum)
        self.seen = runtime_context.get_map_state(seen)

    def process_element(self, value, ctx):
        sensor, celsius = value
        count, total = self.count_and_sum.value() or (0, 0.0)
        count, total = count + 1, total + celsius
        self.count_and_sum.update((count, total))
        rounded = round(celsius)
        self.seen[rounded] = (self.seen[rounded] or 0) + 1  # MapState item syntax: m[k] is None when absent
        most_frequent = max(self.seen.items(), key=lambda kv: (kv[1], -kv[0]))[0]
        yield sensor, count, round(total / count, 2), most_frequent


def main() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    readings = env.from_collection(READINGS, type_info=Types.TUPLE([Types.STRING(), Types.DOUBLE()]))
    stats = readings.key_by(lambda r: r[0]).process(
        RunningStats(), output_type=Types.TUPLE([Types.STRING(), Types.INT(), Types.DOUBLE(), Types.INT()])
    )
    stats.print()
    env.execute("state access")


if __name__ == "__main__":
    main()
