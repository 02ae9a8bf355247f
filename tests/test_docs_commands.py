"""Every ``zephon`` / ``zephon-run`` / ``bash scripts/...`` command and every Python example
of Zephon shown in README.md and docs/ (issue 27): found by parsing the Markdown's fenced
code blocks, never listed here, and each one run in a non-training form so that the docs
cannot drift from the code.

How each command is checked (:func:`check_of`):

* ``zephon plan``, ``compare``, ``fit``, ``propose``, ``datasets``, ``jobs`` really run (in
  this process, through ``orchestrator.cli.main``) in a work folder holding what their
  arguments name: an experiment file over the test corpus, RegMix's tables (trimmed), an
  empty tracking store and an empty service root; each must exit with the code the CLI
  documents (a comparison or fit over runs an empty store lacks: 2, invalid input).
* ``zephon run`` and ``verify-elastic`` run as ``zephon plan`` with the same experiment,
  overrides and dp (their other options dropped): the plan is what training would start.
* ``zephon-run ...`` and ``bash scripts/main.sh ...`` run as a dry run (``dry_run=true``),
  every job of a sweep planned; a search refuses dry runs, so its config is composed
  (``--cfg hydra``) and the search settings validated as the sweeper does.
* The rest go through the CLI's own argument parser (``orchestrator.cli.parse_arguments``):
  commands that need a trained run folder, a running job service, or serve forever.
* ``bash scripts/tracking_server.sh`` (a server that runs until stopped) has its arguments
  parsed by the parser of the module it runs (:data:`SCRIPT_PARSERS`).
* ``bash scripts/test.sh`` and ``bash scripts/bench.sh`` are skipped, each for a reason
  named in :data:`SKIPPED_SCRIPTS`.
"""

from __future__ import annotations

import ast
import contextlib
import gzip
import io
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import torch.distributed.checkpoint as dcp
import yaml
import zstandard

from orchestrator import cli
from orchestrator.errors import EXIT_INVALID, EXIT_OK
from orchestrator.experiment import ExperimentConfig, load_experiment
from orchestrator.run.recipe import recipe_of
from orchestrator.service.config import ServiceConfig
from orchestrator.tracking import team_server
from pipeline import Dataset
from sweeps.mixes import MixSpace
from sweeps.search_state import SearchSpec
from sweeps.summary import SWEEP_FILE
from tests.support import REPO
from tests.support.cli import zephon_in_process

DOC_FILES = sorted(
    [REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "docs").glob("design/*.md")]
)
"""The Markdown whose commands and examples are checked."""

SHELL_LANGUAGES = {"bash", "sh", "shell", "console", ""}
"""Fence languages whose lines may be commands (an untagged fence may hold shell lines)."""

FENCE = re.compile(r"^\s*```\s*([\w+-]*)")
COMMAND_START = re.compile(r"^\s*(?:\.venv/bin/)?(?:zephon|zephon-run)(?:\s|$)|^\s*bash scripts/")
"""A shell line this test checks: the ``zephon`` CLIs (or their ``.venv/bin`` forms) or a
repository script."""

SKIPPED_SCRIPTS = {
    "scripts/test.sh": "the whole test suite (lint, format, every test): this file is in it",
    "scripts/bench.sh": "the benchmarks take minutes each",
}
"""Scripts not run, each with its reason (``scripts/main.sh`` is dry-run instead)."""

SCRIPT_PARSERS = {"scripts/tracking_server.sh": team_server.build_parser}
"""Scripts that serve until stopped: their arguments are parsed by their module's parser."""

PARSED_ONLY = {
    "resume": "needs a run folder with a checkpoint, which only training makes",
    "sync": "needs the run folder of a tracked run, which only training makes",
    "serve": "a long-running server (the job scheduler)",
    "mcp": "a long-running server (MCP over stdio)",
    "submit": "queues a job for a running `zephon serve`",
    "status": "needs a job of a running `zephon serve`",
    "wait": "needs a job of a running `zephon serve`",
    "cancel": "needs a job of a running `zephon serve`",
    "logs": "needs a job of a running `zephon serve`",
}
"""``zephon`` subcommands only parsed, each with its reason."""

AS_PLAN = {"run", "verify-elastic"}
"""Subcommands that would train: checked as ``zephon plan`` of the same experiment."""

OVER_EMPTY_STORE = {"compare", "fit", "propose"}
"""Subcommands over tracked runs: run against the work folder's empty ./mlflow.db (their
tables forms, ``--mixtures``, run on RegMix's tables instead)."""

TABLE_PLACEHOLDERS = {
    "M.csv": "train_mixture_1m.csv",
    "S.csv": "train_pile_loss_1m.csv",
    "P.csv": "test_mixture_1m.csv",
    "COL": "metric/the_pile_pile_cc_val_loss",
}
"""The synopsis's table placeholders, as RegMix's files and target column."""

REGMIX = REPO / "tests" / "data" / "regmix"
REGMIX_ROWS = 16
"""RegMix runs kept per table: fit and propose on all 512 take minutes; 16 take seconds."""

EXAMPLE_STEPS = 1
"""Global steps a Python example's training loop runs before the test ends it."""

BASE_CHECKPOINT = "runs/base/titan/checkpoint/step-2"
"""Where docs/anneals.md's anneals start (the work folder holds one for ``exp.yaml``)."""

NOTHING_TRACKED = re.compile(r"no MLflow (run|experiment)|no training runs|no tracking store at")
"""The refusal of a command naming runs that the work folder's tracking store does not hold
(or reading a store that was never made there)."""


@dataclass(frozen=True)
class DocCommand:
    """One command of a fenced block: where it is and its words (continuations joined,
    the comment dropped, a synopsis's ``[...]`` and ``...`` removed)."""

    file: str
    line: int
    words: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Block:
    """A fenced code block: its language and its lines, numbered from 1 in the file."""

    file: str
    language: str
    first_line: int
    lines: tuple[str, ...]


@dataclass
class Check:
    """How a command is checked: ``run`` (``zephon`` in this process), ``dry-run``
    (``zephon-run`` with ``dry_run=true``), ``compose`` (a search's config), ``parse``,
    ``parse-script`` or ``skip``; ``argv`` what runs; ``reason`` why not more."""

    how: str
    argv: list[str] = field(default_factory=list)
    reason: str = ""
    expected_exit: int = EXIT_OK


def fenced_blocks(path: Path) -> list[Block]:
    """The fenced code blocks of the Markdown file ``path``."""
    blocks, language, start, lines = [], None, 0, []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        fence = FENCE.match(line)
        if fence and language is None:
            language, start, lines = fence.group(1).lower(), number + 1, []
        elif line.strip().startswith("```") and language is not None:
            blocks.append(Block(str(path.relative_to(REPO)), language, start, tuple(lines)))
            language = None
        elif language is not None:
            lines.append(line)
    assert language is None, f"{path}: a fence is not closed"
    return blocks


def joined_lines(block: Block) -> Iterator[tuple[int, str]]:
    """The block's logical lines (``\\`` continuations and quotes open across lines
    joined), each with its first line's number."""
    pending, first = "", 0
    for offset, line in enumerate(block.lines):
        if not pending:
            first = block.first_line + offset
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        if COMMAND_START.match(pending + line) and quote_open(pending + line):
            pending += line + "\n"
            continue
        yield first, pending + line
        pending = ""
    if pending:
        yield first, pending


def quote_open(line: str) -> bool:
    """Whether ``line`` ends inside a quoted string (the shell reads on to the next line)."""
    try:
        shlex.split(line, comments=True)
    except ValueError:
        return True
    return False


def synopsis_alternatives(words: list[str], subcommands: set[str]) -> list[list[str]]:
    """``words`` as the commands they stand for: a synopsis ``zephon wait JOB | cancel JOB``
    (``|`` between subcommands or between argument sets of one subcommand) is one command
    per alternative; ``[--option X]`` keeps the option, ``...`` is dropped."""
    words = [w for w in unbracketed(words) if w not in ("...", "&")]
    if "|" not in words:
        return [words]
    program, subcommand = words[0], words[1]
    segments: list[list[str]] = [[]]
    for word in words:
        if word == "|":
            segments.append([])
        else:
            segments[-1].append(word)
    alternatives = [segments[0]]
    for segment in segments[1:]:
        prefix = [program] if segment[0] in subcommands else [program, subcommand]
        alternatives.append([*prefix, *segment])
    return alternatives


def unbracketed(words: list[str]) -> list[str]:
    """``words`` without a synopsis's optional brackets (``[--threshold 0.01]`` as
    ``--threshold 0.01``); brackets of values (``replicate_dp=[1,2]``) stay."""
    plain, optional = [], False
    for word in words:
        if word.startswith("[-"):
            word, optional = word[1:], True
        if optional and word.endswith("]"):
            word, optional = word[:-1], False
        plain.append(word)
    return plain


def cli_subcommands() -> set[str]:
    """The ``zephon`` subcommands, from the CLI's own parser."""
    parser = cli.build_parser()
    (choices,) = [a.choices for a in parser._actions if a.dest == "command"]
    return set(choices)


def documented_commands() -> list[DocCommand]:
    """Every command of the shell-like fenced blocks of :data:`DOC_FILES`."""
    subcommands = cli_subcommands()
    commands = []
    for path in DOC_FILES:
        for block in fenced_blocks(path):
            if block.language not in SHELL_LANGUAGES:
                continue
            for number, line in joined_lines(block):
                if not COMMAND_START.match(line):
                    continue
                words = shlex.split(line, comments=True)
                words[0] = Path(words[0]).name if words[0].startswith(".venv/") else words[0]
                for alternative in synopsis_alternatives(words, subcommands):
                    commands.append(DocCommand(block.file, number, tuple(alternative)))
    return commands


def python_examples() -> list[tuple[str, str]]:
    """(``file:line``, source) of every ```python block of :data:`DOC_FILES` that uses
    Zephon (imports ``pipeline`` or ``orchestrator``)."""
    uses_zephon = re.compile(r"^\s*(from|import)\s+(pipeline|orchestrator)\b", re.MULTILINE)
    return [
        (f"{block.file}:{block.first_line}", "\n".join(block.lines))
        for path in DOC_FILES
        for block in fenced_blocks(path)
        if block.language == "python" and uses_zephon.search("\n".join(block.lines))
    ]


def check_of(command: DocCommand) -> Check:
    """How ``command`` is checked (the module docstring), and what runs."""
    program, *arguments = command.words
    if program == "bash":
        script, *rest = arguments
        if script in SKIPPED_SCRIPTS:
            return Check("skip", reason=SKIPPED_SCRIPTS[script])
        if script in SCRIPT_PARSERS:
            return Check("parse-script", [script, *rest], "a server that runs until stopped")
        assert script == "scripts/main.sh", f"{command.id}: an unknown script {script}"
        if rest[:1] == ["--search"]:
            return sweep_check(["--config-name", "search", *rest[1:]])
        if rest[:1] == ["--anneal"]:  # the anneals' sweep; the base's training is not run
            return sweep_check(["--config-name", "anneal", *rest[1:]])
        if rest[:1] == ["--curation"]:
            return sweep_check(["--config-name", "curation", *rest[1:]])
        return sweep_check(["--config-name", "main", *rest])
    if program == "zephon-run":
        return sweep_check(arguments)
    assert program == "zephon", command.id
    subcommand = arguments[0]
    if subcommand in PARSED_ONLY:
        return Check("parse", arguments, PARSED_ONLY[subcommand])
    if subcommand in AS_PLAN:
        parsed = cli.parse_arguments(arguments)
        plan = ["plan", *(["-c", parsed.config] if parsed.config else []), *parsed.overrides]
        plan += [*(["--dp", str(parsed.dp)] if parsed.dp else []), "--json"]
        plan.append("resources.oversubscribe=true")  # the docs' dp is for their machine's devices
        return Check("run", plan, f"`zephon {subcommand}` trains: its plan instead")
    if subcommand in OVER_EMPTY_STORE and "--mixtures" not in arguments:
        return Check("run", arguments, "over an empty tracking store", EXIT_INVALID)
    return Check("run", [TABLE_PLACEHOLDERS.get(w, w) for w in arguments])


def sweep_check(arguments: list[str]) -> Check:
    """``zephon-run ARGUMENTS`` as a dry run, or (a search, which refuses dry runs) as its
    composed Hydra config."""
    searching = arguments[:2] == ["--config-name", "search"] or any(
        a.startswith("hydra.sweeper.mix.search") for a in arguments
    )
    if searching:
        return Check(
            "compose",
            ["--cfg", "hydra", *(a for a in arguments if a not in ("-m", "--multirun"))],
            "a search cannot dry-run",
        )
    return Check("dry-run", [*arguments, "dry_run=true"])


COMMANDS = documented_commands()
EXAMPLES = python_examples()
SWEEP_CHECKS: dict[tuple[str, ...], tuple[subprocess.CompletedProcess[str], Path]] = {}
"""``zephon-run`` checks made so far in this module, by their arguments, with their work
folder: ``bash scripts/main.sh``, shown in README.md and docs/guide.md, dry-runs once."""


# -- the work folder ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory, corpus: dict[str, list[Path]]) -> Path:
    """A folder holding what the documented commands name: ``exp.yaml`` (a small
    experiment over the test corpus), ``filtered/docs.jsonl`` (a copy of its docs domain,
    the longer half), RegMix's tables (:data:`REGMIX_ROWS` runs each) and
    a service root ``svc`` without jobs (./mlflow.db is created by the first command that
    looks)."""
    folder = tmp_path_factory.mktemp("docs-commands")
    experiment = {
        "model": {"config": "zephon_mini"},
        "data": {
            "datasets": {name: [str(p) for p in paths] for name, paths in corpus.items()},
            "seq_len": 128,
            "global_batch_size": 8,
        },
        "train": {"steps": 4},
    }
    (folder / "exp.yaml").write_text(yaml.safe_dump(experiment))
    # docs/curation.md's filtered copy of docs: its longer half, written elsewhere
    docs = Dataset("docs", [str(p) for p in corpus["docs"]])
    texts = docs.read_texts(range(docs.num_records))
    kept = sorted(texts, key=len)[len(texts) // 2 :]
    (folder / "filtered").mkdir()
    (folder / "filtered" / "docs.jsonl").write_text(
        "".join(json.dumps({"text": t}) + "\n" for t in kept)
    )
    write_base_checkpoint(folder / BASE_CHECKPOINT, load_experiment(experiment))
    for table in REGMIX.glob("*.csv"):
        rows = table.read_text().splitlines(keepends=True)[: REGMIX_ROWS + 1]
        (folder / table.name).write_text("".join(rows))
    ServiceConfig(root=str(folder / "svc")).save()  # as `zephon serve --root svc` leaves it
    return folder


def write_base_checkpoint(path: Path, experiment: ExperimentConfig) -> None:
    """A DCP checkpoint of ``experiment``'s model (its recipe's shapes, zeros), where
    docs/anneals.md's anneals start from: a plan checks its shapes, not its values."""
    shapes = recipe_of(replace(experiment, train=replace(experiment.train, precision="float32")))
    state = {name: torch.zeros(shape) for name, shape in shapes.parameter_shapes["titan"].items()}
    dcp.save(state, storage_writer=dcp.FileSystemWriter(str(path)), no_dist=True)


def zephon_run(arguments: list[str], folder: Path) -> subprocess.CompletedProcess[str]:
    """``zephon-run ARGUMENTS`` in ``folder``, its sweeps and single runs' Hydra output
    under ``folder``."""
    command = [sys.executable, "-m", "sweeps.app", *arguments]
    command += [f"hydra.sweep.dir={folder}/multirun", f"hydra.run.dir={folder}/outputs"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300)


# -- the tests ----------------------------------------------------------------------------


def test_the_docs_show_commands_and_examples() -> None:
    """The parser finds what the docs hold (so that the checks below check something), and
    only a few, named, commands escape running."""
    assert len(COMMANDS) >= 20 and len(EXAMPLES) >= 2
    programs = {c.words[0] for c in COMMANDS}
    assert programs == {"zephon", "zephon-run", "bash"}, programs
    checks = [check_of(c) for c in COMMANDS]
    skipped = {c.reason for c in checks if c.how == "skip"}
    assert skipped <= set(SKIPPED_SCRIPTS.values()) and len(skipped) <= len(SKIPPED_SCRIPTS)
    ran = [c for c in checks if c.how in ("run", "dry-run")]
    assert len(ran) > len(checks) / 2, "most documented commands must really run"


@pytest.mark.parametrize("command", COMMANDS, ids=[c.id for c in COMMANDS])
def test_a_documented_command_runs(command: DocCommand, work: Path) -> None:
    """The command parses with the CLI's own parser and runs in its non-training form,
    exiting as documented (module docstring)."""
    check = check_of(command)
    if check.how == "skip":
        pytest.skip(check.reason)
    if command.words[0] == "zephon":
        cli.parse_arguments(list(command.words[1:]))
    if check.how == "parse":
        cli.parse_arguments(check.argv)
        return
    if check.how == "parse-script":
        script, *arguments = check.argv
        SCRIPT_PARSERS[script]().parse_args(arguments)
        return
    if check.how == "run":
        done = zephon_in_process(work, *check.argv)
        code, output = done.returncode, done.stdout + done.stderr
        assert code == check.expected_exit, f"zephon {shlex.join(check.argv)}:\n{output[-3000:]}"
        if check.expected_exit != EXIT_OK:
            assert NOTHING_TRACKED.search(output), output
        elif "--json" in check.argv:
            assert "error" not in json.loads(output.splitlines()[-1])
        return
    if tuple(check.argv) not in SWEEP_CHECKS:  # the same command shown twice runs once
        folder = work / command.id.replace("/", "_").replace(":", "_")
        folder.mkdir()
        SWEEP_CHECKS[tuple(check.argv)] = (zephon_run(check.argv, folder), folder)
    done, folder = SWEEP_CHECKS[tuple(check.argv)]
    assert done.returncode == 0, f"zephon-run {shlex.join(check.argv)}:\n{done.stderr[-4000:]}"
    if check.how == "compose":
        sweeper = yaml.safe_load(done.stdout)["hydra"]["sweeper"]
        space = MixSpace(**{k: v for k, v in sweeper["mix"].items() if v is not None})
        assert space.search is not None
        SearchSpec.from_config(dict(space.search))
        return
    summaries = list((folder / "multirun").glob(SWEEP_FILE))
    for summary in summaries:  # a mix sweep: every job planned
        jobs = json.loads(summary.read_text())["jobs"]
        assert jobs and all(j["status"] == "succeeded" for j in jobs), jobs
    assert summaries or '"run_name"' in done.stdout, done.stdout[-3000:]


def write_dataset_files(pattern: str, texts: list[str], folder: Path) -> None:
    """Files matching the glob ``pattern`` under ``folder``, in the format its extension
    names, holding ``texts`` as records with a ``text`` field."""
    path = folder / pattern.replace("*", "part-00000")
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = b"".join(orjson.dumps({"text": t}) + b"\n" for t in texts)
    if path.name.endswith(".jsonl.zst"):
        path.write_bytes(zstandard.ZstdCompressor().compress(lines))
    elif path.name.endswith(".jsonl.gz"):
        path.write_bytes(gzip.compress(lines))
    elif path.name.endswith(".jsonl"):
        path.write_bytes(lines)
    elif path.name.endswith(".parquet"):
        pq.write_table(pa.table({"text": texts}), path)
    else:
        raise AssertionError(f"no writer for {pattern}")


def corpus_texts(corpus: dict[str, list[Path]], count: int) -> list[str]:
    """``count`` records of real text from the test corpus's code and docs domains."""
    texts: list[str] = []
    for name in ("code", "docs"):
        for shard in corpus[name]:
            raw = shard.read_bytes()
            if shard.name.endswith(".zst"):
                raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)).read()
            elif shard.name.endswith(".gz"):
                raw = gzip.decompress(raw)
            texts += [orjson.loads(line)["text"] for line in raw.splitlines()[: count // 2]]
    return texts[:count]


class FirstSteps:
    """An example's pipeline as its loop sees it: the first ``steps`` global steps, then
    the end; everything else is the pipeline's."""

    def __init__(self, pipeline: Any, steps: int) -> None:
        self.pipeline, self.steps = pipeline, steps

    def __iter__(self) -> Iterator[Any]:
        ended = 0
        for batch in self.pipeline:
            yield batch
            ended += batch.is_last
            if ended == self.steps:
                return

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pipeline, name)


@pytest.mark.parametrize(("where", "source"), EXAMPLES, ids=[w for w, _ in EXAMPLES])
def test_a_documented_python_example_runs(
    where: str, source: str, corpus: dict[str, list[Path]], tmp_path: Path
) -> None:
    """The example runs as written, over the data files it names (written here from real
    text), its training loop ended after :data:`EXAMPLE_STEPS` global steps, and the
    statements after the loop run on the state it left."""
    for pattern in sorted(set(re.findall(r"[\"']((?:[\w.-]+/)+\*[\w.]+)[\"']", source))):
        write_dataset_files(pattern, corpus_texts(corpus, 300), tmp_path)
    batches: list[Any] = []
    logged: list[Any] = []
    namespace: dict[str, Any] = {"rank": 0, "world": 1, "train_step": batches.append}
    namespace |= {"log": logged.append, "states_of_all_ranks": []}
    with contextlib.chdir(tmp_path), contextlib.redirect_stdout(io.StringIO()):
        for statement in ast.parse(source).body:
            loop = isinstance(statement, ast.For) and isinstance(statement.iter, ast.Name)
            if loop:
                iterated = namespace[statement.iter.id]
                namespace[statement.iter.id] = FirstSteps(iterated, EXAMPLE_STEPS)
            exec(compile(ast.Module([statement], []), where, "exec"), namespace)
            if loop:
                namespace[statement.iter.id] = iterated
                if hasattr(iterated, "state_dict"):  # one rank: its state is every rank's
                    namespace["states_of_all_ranks"].append(iterated.state_dict())
    assert batches, f"{where}: the loop trained on nothing"
    if "log(" in source:
        assert len(logged) == EXAMPLE_STEPS, logged
