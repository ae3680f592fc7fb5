"""The README's generated benchmark table: headline figures, their rendering, parsing and comparison.

Pure functions only (no I/O beyond what callers pass in), so the round trip and the partial update
are unit-tested (tests/unit/test_bench_table.py). bench/run.py reads the previous figures from the
README block before measuring, prints each new figure against them, and rewrites the block at the end.

The block sits between ``BEGIN`` and ``END`` in README.md's "## Performance"::

    <!-- bench:begin -->
    | figure | value | goal | key |
    |---|---|---|---|
    | word count job only, Millstream | 8.9 s | | `wordcount.millstream_job_s` |
    ...

    - **wordcount, exchange**: generated 2026-11-26 13:40 UTC on ... by `python bench/run.py ...`
    <!-- bench:end -->

A row's key (in backticks) and its value cell are what is parsed back; one "generated" line per
run names the benchmarks whose rows it produced, so a partial run (``--only X``) replaces X's rows
and X's mention in the older lines, and leaves the other rows and lines as they were.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

BEGIN = "<!-- bench:begin -->"
END = "<!-- bench:end -->"
HEADER = "| figure | value | goal | key |\n|---|---|---|---|"


@dataclass(frozen=True)
class Figure:
    """One headline figure of a benchmark. ``key`` is ``benchmark.name``; ``better`` is "lower" or "higher".

    ``signed``: a difference (A minus B, a loss in %) that may be zero or negative: compared with its
    previous value by difference, since a ratio of two small differences says little (0.03 s -> 0.3 s is not "10x").
    """

    key: str
    label: str
    value: float
    unit: str
    better: str
    goal: str = ""
    signed: bool = False

    def __post_init__(self) -> None:
        if self.better not in ("lower", "higher"):
            raise ValueError(f"figure {self.key!r}: better must be 'lower' or 'higher', not {self.better!r}")
        if "." not in self.key or "|" in self.label or "`" in self.key:
            raise ValueError(f"figure key {self.key!r} must be 'benchmark.name' and label {self.label!r} must not contain '|'")

    @property
    def benchmark(self) -> str:
        return self.key.split(".", 1)[0]


@dataclass(frozen=True)
class Generated:
    """One run that produced some of the block's rows: the benchmarks it covered and how it ran."""

    benchmarks: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class Block:
    """What the README block holds: previous values by key (with their rows) and the runs' lines."""

    rows: dict[str, tuple[str, float, str, str]]  # key -> (label, value, unit, goal)
    generated: list[Generated]


def format_value(value: float, unit: str = "") -> str:
    """Three significant figures (no exponent), thousands separated; the unit after a space."""
    if math.isnan(value):
        number = "nan"
    elif value == 0 or abs(value) >= 100:
        number = f"{value:,.0f}"
    else:
        digits = max(0, 2 - int(math.floor(math.log10(abs(value)))))
        number = f"{value:,.{digits}f}"
    return f"{number} {unit}".rstrip() if unit and unit != "x" else (f"{number}x" if unit == "x" else number)


_NUMBER = re.compile(r"^\s*([+-]?(?:[\d,]+(?:\.\d*)?|\.\d+|nan))\s*(x|\S.*)?$")


def parse_value(cell: str) -> tuple[float, str] | None:
    """``"3,410,000 records/s"`` -> (3410000.0, "records/s"); None if the cell holds no number."""
    match = _NUMBER.match(cell.replace("**", "").strip())
    if match is None:
        return None
    try:
        value = float(match.group(1).replace(",", ""))
    except ValueError:
        return None
    return value, (match.group(2) or "").strip()


def render_block(figures: list[Figure], generated: list[Generated]) -> str:
    """The whole block, markers included, rows in the order given."""
    lines = [BEGIN, HEADER]
    for f in figures:
        lines.append(f"| {f.label} | {format_value(f.value, f.unit)} | {f.goal} | `{f.key}` |")
    lines.append("")
    for g in generated:
        lines.append(f"- **{', '.join(g.benchmarks)}**: {g.text}")
    lines.append(END)
    return "\n".join(lines)


_ROW = re.compile(r"^\|\s*(?P<label>[^|]*?)\s*\|\s*(?P<value>[^|]*?)\s*\|\s*(?P<goal>[^|]*?)\s*\|\s*`(?P<key>[^`]+)`\s*\|\s*$")
_GENERATED = re.compile(r"^- \*\*(?P<benchmarks>[^*]+)\*\*: (?P<text>.*)$")


def find_block(readme: str) -> tuple[int, int] | None:
    """(start, end) offsets of the block, markers included; None if it is missing or malformed."""
    start = readme.find(BEGIN)
    if start < 0:
        return None
    end = readme.find(END, start)
    if end < 0:
        return None
    return start, end + len(END)


def parse_block(readme: str) -> Block:
    """The previous figures in ``readme``; a missing block, or rows that do not parse, are no figures (never an error)."""
    span = find_block(readme)
    if span is None:
        return Block({}, [])
    rows: dict[str, tuple[str, float, str, str]] = {}
    generated: list[Generated] = []
    for line in readme[span[0]:span[1]].splitlines():
        row = _ROW.match(line.strip())
        if row:
            parsed = parse_value(row.group("value"))
            if parsed is not None:
                rows[row.group("key")] = (row.group("label"), parsed[0], parsed[1], row.group("goal"))
            continue
        gen = _GENERATED.match(line.strip())
        if gen:
            names = tuple(n.strip() for n in gen.group("benchmarks").split(",") if n.strip())
            generated.append(Generated(names, gen.group("text")))
    return Block(rows, generated)


def previous_value(block: Block, figure: Figure) -> float | None:
    """The block's value for ``figure``; None when there is none or it was in another unit (no ratio across units)."""
    row = block.rows.get(figure.key)
    if row is None or row[2] != figure.unit:
        return None
    return row[1]


@dataclass(frozen=True)
class Comparison:
    figure: Figure
    previous: float | None
    ratio: float | None  # new / previous, when both are positive
    difference: float | None  # new - previous, when a ratio means nothing (zero or negative figures)
    verdict: str  # "better", "worse", "same" or "new"


def compare(figure: Figure, previous: float | None) -> Comparison:
    """The new figure against the previous one, judged by its direction (2 % either way counts as "same")."""
    if previous is None or math.isnan(previous) or math.isnan(figure.value):
        return Comparison(figure, previous, None, None, "new")
    if previous > 0 and figure.value > 0 and not figure.signed:
        ratio = figure.value / previous
        change = ratio - 1
        verdict = "same" if abs(change) < 0.02 else ("better" if (change < 0) == (figure.better == "lower") else "worse")
        return Comparison(figure, previous, ratio, None, verdict)
    difference = figure.value - previous
    scale = max(abs(previous), abs(figure.value), 1e-12)
    verdict = "same" if abs(difference) / scale < 0.02 else ("better" if (difference < 0) == (figure.better == "lower") else "worse")
    return Comparison(figure, previous, None, difference, verdict)


def describe(c: Comparison) -> str:
    """One printed line: label, new value, previous value, ratio (or difference) and verdict."""
    f = c.figure
    new = format_value(f.value, f.unit)
    if c.verdict == "new":
        return f"  {f.label}: {new} (no previous figure)"
    previous = format_value(c.previous, f.unit)  # type: ignore[arg-type]
    change = f"{c.ratio:.2f}x" if c.ratio is not None else f"{c.difference:+.3g} {f.unit}".rstrip()
    return f"  {f.label}: {new}, previous {previous}: {change}, {c.verdict} ({f.better} is better)"


def merge(previous: Block, figures: list[Figure], run: Generated, order: list[str] | None = None) -> str:
    """The new block: the benchmarks in ``run`` get ``figures``; every other benchmark keeps its previous rows.

    Older generated lines lose the benchmarks this run re-measured (and vanish when none is left),
    so each row's line says which run produced it. ``order``: benchmark names in table order
    (the rest after them, as they came).
    """
    measured = set(run.benchmarks)
    kept: list[Figure] = []
    for key, (label, value, unit, goal) in previous.rows.items():
        benchmark = key.split(".", 1)[0]
        if benchmark not in measured:
            kept.append(Figure(key, label, value, unit, "lower", goal))  # direction unused when rendering
    rows = kept + list(figures)
    if order:
        rank = {name: i for i, name in enumerate(order)}
        rows.sort(key=lambda f: rank.get(f.benchmark, len(rank)))  # stable: rows keep their order within a benchmark
    generated = []
    for g in previous.generated:
        left = tuple(b for b in g.benchmarks if b not in measured)
        if left:
            generated.append(Generated(left, g.text))
    generated.append(run)
    return render_block(rows, generated)


def replace_block(readme: str, block: str, anchor: str = "## Performance") -> str:
    """``readme`` with its block replaced; with no block, ``block`` goes after the ``anchor`` heading's first paragraph."""
    span = find_block(readme)
    if span is not None:
        return readme[:span[0]] + block + readme[span[1]:]
    at = readme.find(anchor)
    if at < 0:
        return readme.rstrip("\n") + "\n\n" + block + "\n"
    paragraph_end = readme.find("\n\n", at + len(anchor) + 2)
    if paragraph_end < 0:
        return readme.rstrip("\n") + "\n\n" + block + "\n"
    return readme[:paragraph_end] + "\n\n" + block + readme[paragraph_end:]
