"""Every measured figure of the README and docs/ is backed: it is a number (or a rounding of
one) of a results file under ``benchmarks/results/`` that its paragraph or table names, or
its line says which outside source it is quoted from.

What counts as a figure (:data:`FIGURE`): a number written with a unit of time (ns, µs, ms,
s, min, h and their words), of size (bytes, KB, MB, GB, TB and the KiB family) or of
throughput (tokens/s, M tokens/s, ns/token), a ratio with ``x`` or ``×`` attached
(``0.58x``, ``2.3×``), or a percentage; both ends of a range (``5.9-6.2 M tokens/s``). In a
table, every number of a column whose header carries such a unit (``cold s``, ``MB``,
``ratio``) counts as well. Inline code is skipped (flags and config values live there).

Not measurements, so not checked (:data:`NOT_MEASURED`): a figure right after a bound or a
setting's word (``<``, ``>=``, ``under``, ``at most``, ``within``, ``every``, ``after``,
``default``, ``timeout``, ``goal``, ``target``, ...: goals, limits, periods) and a
percentage that is a statistical setting (``95% interval``, ``80% power``, ``5% budget``).
A figure that is a setting in other words is listed in an HTML comment of its paragraph,
``<!-- not measured: 16 KB, 5% -->``.

Backed: a results file is named in the figure's paragraph, list item or table row (or the
table's header and the paragraph right above the table), or in the first paragraph of its
section (where a benchmark's section says what made its figures), as a link or a path
(``benchmarks/results/cores.md``, ``results/cores.{json,md}``), and one of its numbers,
in its markdown or its JSON, rounds to the figure at the figure's decimals (a percentage
also as a fraction). Or the line (a table row) or paragraph says ``quoted from <source>``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from tests.support import REPO

UNIT = (
    r"(?:ns|µs|us|ms|s|sec|seconds?|min|minutes?|h|hours?|[KMGT]i?B|bytes"
    r"|(?:[Mk] )?tok(?:en)?s/s|tokens/CPU-s|ns/token)"
)
NUMBER = r"\d[\d,]*(?:\.\d+)?"
FIGURE = re.compile(
    rf"(?<![\w.\-/@#])(?P<num>{NUMBER})(?:[-–](?P<end>{NUMBER}))?"
    rf"(?:\s?{UNIT}(?![\w/])|[x×](?!\w)|\s?%)"
)
"""A measured figure: a number with a unit of time, size or throughput, a ratio, a percentage."""
COLUMN_UNIT = re.compile(r"(?<![\w/])(?:s|ms|[KMG]B|%|ratio|tok/s|tokens/s|ns/token|s/step)(?!\w)")
"""A table header whose column holds figures in that unit."""
NOT_MEASURED = re.compile(
    r"(?:<|>|≤|≥|<=|>=|\bunder|\bless than|\bmore than|\bat most|\bat least|\bwithin|\bup to|\bevery|\bafter|\bplus"
    r"|\bdefault|\btimeout|\blimit|\bgoal|\btarget|\bbound|\bcap)[:\s]*(?:~|about\s)?$"
)
"""The words before a figure that make it a bound, a goal or a setting, not a measurement."""
STATISTICAL_SETTING = re.compile(
    r"^%\s(?:\w+\s)?(?:interval|power|confidence|decision|error|budget|share)"
)
"""The words after a percentage that make it a setting of a statistic."""
ALLOWED = re.compile(r"<!--\s*not measured:\s*(.*?)\s*-->")
QUOTED = re.compile(r"\bquoted from \S")
RESULTS = re.compile(r"results/([\w-]+)(?:\.\{json,md\}|\.md|\.json)")
INLINE_CODE = re.compile(r"`[^`]*`")
FENCE = re.compile(r"^(```|~~~)")
RESULTS_DIR = REPO / "benchmarks" / "results"
NOT_A_RESULT = re.compile(
    r"\d{4}-\d\d-\d\d(?:[T ][\d:.+]+)?|\b\d\d:\d\d(?::\d\d)?|\b(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"
)
"""Dates, times and commits: the numbers of a results file that are no result."""


@dataclass(frozen=True)
class Figure:
    """One figure as written (``text``), its value and where it stands."""

    text: str
    value: str
    percent: bool
    line: int


def figures_in(text: str, line: int) -> list[Figure]:
    """The measured figures of one line of prose (inline code dropped), settings left out."""
    text = INLINE_CODE.sub(lambda m: " " * len(m.group()), text)
    found = []
    for match in FIGURE.finditer(text):
        before, after = (
            text[: match.start()],
            text[match.end("end") if match["end"] else match.end("num") :],
        )
        if NOT_MEASURED.search(before[-24:]) or STATISTICAL_SETTING.match(after.lstrip(" ")):
            continue
        percent = match.group().endswith("%")
        found += [
            Figure(match.group(), value, percent, line)
            for value in (match["num"], match["end"])
            if value is not None
        ]
    return found


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def _table_figures(rows: list[tuple[int, str]]) -> list[tuple[Figure, str]]:
    """Each data row's figures, with its row: inline ones, and every number of a unit column."""
    header = _cells(rows[0][1])
    unit_columns = {
        i for i, name in enumerate(header) if COLUMN_UNIT.search(INLINE_CODE.sub("", name))
    }
    found = []
    for number, row in rows[2:]:
        cells = _cells(row)
        for i, cell in enumerate(cells):
            inline = figures_in(cell, number)
            found += [(figure, row) for figure in inline]
            if i in unit_columns and not inline:
                for value in re.findall(rf"(?<![\w.\-])({NUMBER})", INLINE_CODE.sub("", cell)):
                    found.append((Figure(cell, value, "%" in header[i], number), row))
    return found


def blocks(page: str) -> list[list[tuple[int, str]]]:
    """The page's paragraphs, list items and tables as numbered lines; fenced code is its own
    block per line (a comment there stands alone)."""
    result: list[list[tuple[int, str]]] = []
    current: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(page.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
        starts_item = re.match(r"\s*(?:[*-]|\d+\.)\s", line) is not None
        is_row = line.startswith("|")
        if (
            fenced
            or not line.strip()
            or starts_item
            or (current and is_row != current[-1][1].startswith("|"))
        ):
            if current:
                result.append(current)
            current = []
        if line.strip() and not FENCE.match(line):
            if fenced:
                result.append([(number, line)])
            else:
                current.append((number, line))
    if current:
        result.append(current)
    return result


@functools.cache
def results_numbers(stem: str) -> tuple[float, ...]:
    """Every number of ``benchmarks/results/<stem>.{md,json}`` that exists."""
    numbers: list[float] = []
    for path in (RESULTS_DIR / f"{stem}.md", RESULTS_DIR / f"{stem}.json"):
        if path.exists():
            numbers += [
                float(n.replace(",", ""))
                for n in re.findall(
                    r"\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?", NOT_A_RESULT.sub(" ", path.read_text())
                )
            ]
    return tuple(numbers)


def backs(stems: set[str], figure: Figure) -> bool:
    """Whether a number of one of the named results files rounds to ``figure``."""
    value = float(figure.value.replace(",", ""))
    decimals = len(figure.value.partition(".")[2])
    tolerance = 0.5 * 10**-decimals + 1e-9
    for stem in stems:
        for n in results_numbers(stem):
            if abs(n - value) <= tolerance or (
                figure.percent and abs(100 * n - value) <= tolerance
            ):
                return True
    return False


def unbacked(page: str) -> list[str]:
    """``line: figure (why)`` for every figure of ``page`` that nothing backs."""
    found = []
    caption = intro = ""
    after_heading = False
    for block in blocks(page):
        text = " ".join(line for _, line in block)
        if after_heading:
            intro = text
        after_heading = text.startswith("#")
        if block[0][1].startswith("|") and len(block) > 2:
            context = f"{intro} {caption} {block[0][1]}"
            entries = [(figure, f"{context} {row}", row) for figure, row in _table_figures(block)]
        else:
            context = f"{intro} {text}"
            entries = [
                (f, context, text) for number, line in block for f in figures_in(line, number)
            ]
        allowed = {a.strip() for m in ALLOWED.finditer(text) for a in m.group(1).split(",")}
        for figure, scope, own in entries:
            stems = set(RESULTS.findall(scope))
            if figure.text in allowed or QUOTED.search(own) or backs(stems, figure):
                continue
            why = f"not in {', '.join(sorted(stems))}" if stems else "no results file named"
            found.append(f"{figure.line}: {figure.text} ({why})")
        caption = text
    return found


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def test_the_checker_tells_a_backed_figure_from_an_unbacked_one() -> None:
    suite = "Tests took 17 min 32 s ([run](benchmarks/results/suite_time.md))."
    assert unbacked(suite) == []
    assert unbacked("Tests took 11 min 32 s ([run](benchmarks/results/suite_time.md)).") == [
        "1: 11 min (not in suite_time)"
    ]
    assert unbacked("The main job takes 234 s.") == ["1: 234 s (no results file named)"]
    assert unbacked("DCLM Core 0.82 against 0.05, a 16x spread (quoted from the study).") == []
    assert unbacked("A 95% interval, goal under 5 s, `--timeout 900s`, 3 steps.") == []
    assert unbacked("Holds 16 KB of text. <!-- not measured: 16 KB -->") == []
    table = (
        "Seconds (`benchmarks/results/suite_time.md`):\n\n"
        "| run | whole script s |\n|---|---:|\n| a | 1055 |\n| b | 999 |\n"
    )
    assert unbacked(table) == ["6: 999 (not in suite_time)"]


def test_every_figure_of_the_readme_and_docs_is_backed() -> None:
    flagged = [
        f"{page.relative_to(REPO)}:{entry}"
        for page in pages()
        for entry in unbacked(page.read_text())
    ]
    assert flagged == []
