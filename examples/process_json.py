"""JSON processing: parse, enrich and route JSON events (`python examples/process_json.py`).

Events arrive as JSON strings; malformed ones go to a side output instead of failing the job, the
rest are enriched and printed as JSON again.
"""
from __future__ import annotations

import json

from millstream.common import Types
from millstream.datastream import OutputTag, ProcessFunction, StreamExecutionEnvironment

EVENTS = [
    '{"user": "ada", "action": "login", "ms": 1000}',
    '{"user": "ada", "action": "buy", "ms": 4000, "amount": 30}',
    "not json at all",
    '{"user": "grace", "action": "buy", "ms": 5000, "amount": 12}',
]

MALFORMED = OutputTag("malformed", Types.STRING())


class ParseAndEnrich(ProcessFunction):
    def process_element(self, value, ctx):
        try:
            event = json.loads(value)
        except json.JSONDecodeError:
            yield MALFORMED, value
            return
        event["spend"] = event.get("amount", 0) > 0
        yield json.dumps(event, sort_keys=True)


def main() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    parsed = env.from_collection(EVENTS, type_info=Types.STRING()).process(ParseAndEnrich(), output_type=Types.STRING())
    parsed.print("event")
    parsed.get_side_output(MALFORMED).print("malformed")
    env.execute("process json")


if __name__ == "__main__":
    main()
