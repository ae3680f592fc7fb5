"""Sliding count windows: ``python examples/windowing/sliding_count_window.py``.

``count_window(3, 2)`` as PyFlink defines it: per key, a window of 3 elements starts at every 2nd
element (window k holds the key's elements 2k, 2k+1, 2k+2, counted from 0) and fires once it holds
all 3. (Java Flink's ``countWindow(3, 2)`` differs: it fires every 2 elements with the last 3.)

    key a: 1 2 3 4 5 6 7  -> windows {1,2,3} = 6, {3,4,5} = 12, {5,6,7} = 18; {7} never fills
    key b: 10 20 30       -> window {10,20,30} = 60; {30} never fills

In arrival order the windows fill at a's 3rd, b's 3rd, a's 5th and a's 7th element, so the output
is (a,6), (b,60), (a,12), (a,18).
"""
from millstream.common import Types
from millstream.datastream import StreamExecutionEnvironment

VALUES = [("a", 1), ("a", 2), ("b", 10), ("a", 3), ("b", 20), ("a", 4), ("b", 30), ("a", 5), ("a", 6), ("a", 7)]


def main() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    values = env.from_collection(VALUES, type_info=Types.TUPLE([Types.STRING(), Types.INT()]))
    sums = (values.key_by(lambda value: value[0], key_type=Types.STRING())
            .count_window(3, 2)
            .reduce(lambda a, b: (a[0], a[1] + b[1]), output_type=Types.TUPLE([Types.STRING(), Types.INT()])))
    sums.print()
    env.execute("sliding count window")


if __name__ == "__main__":
    main()
