"""The composed Hydra config (``conf/``) as an orchestrator experiment.

The schema is :class:`RunConfig`: one :class:`~orchestrator.experiment.ExperimentConfig`
plus the keys of the ``zephon-run`` app (:class:`AppOptions`), registered with Hydra's
``ConfigStore`` when this module is imported; :func:`split` separates them. Importing
this module also registers the ``zephon_local_corpus`` resolver that
``conf/data/stdlib.yaml`` uses, ``zephon_local_tokenizer`` (the main job's), and the
curation preset's ``zephon_local_eval_set`` and ``zephon_local_noisy_corpus``::

    datasets: ${zephon_local_corpus:3}   # build (once) and name the local corpus, 3 MB a domain
    tokenizer: ${zephon_local_tokenizer:3,2048}   # a BPE of 2,048 tokens learned from it
    datasets: ${zephon_local_noisy_corpus:3,docs,1}   # its docs with a junk record per record
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from demo.local_corpus import build_eval_set, build_local_corpus
from demo.local_tokenizer import build_local_tokenizer
from demo.noisy_domain import build_noisy_domain
from orchestrator.experiment import ExperimentConfig, load_experiment
from orchestrator.experiment.overrides import PRESETS_PACKAGE, load_preset
from pipeline import canonical_tokenizer_spec
from pipeline.paths import zephon_home


@dataclass
class SweepMembership:
    """The sweep a run belongs to (set by the mix sweeper, never by hand)."""

    name: str | None = None
    """The sweep's id (MLflow tag ``zephon.sweep``)."""
    parent_run_id: str | None = None
    """The sweep's parent MLflow run."""


@dataclass
class AppOptions:
    """What ``zephon-run`` does with the experiment: the keys of ``conf/config.yaml`` that
    are not the experiment's."""

    run_name: str | None = None
    """The run folder's name; None: ``<name>-<variant>-<time>-<random>``."""
    dry_run: bool = False
    """Plan only: print the resolved plan and fingerprints, train nothing."""
    resume: bool = False
    """Continue the folder of ``run_name`` if it exists (one that finished is reported as is)."""
    fresh: bool = False
    """Train a new run even if a finished run of the same experiment would answer it."""
    at_dp: bool = False
    """Answer only from a run of the same experiment that trained at ``resources.dp`` (a
    sweep's ``replicate_dp`` jobs: each size is the point)."""
    sweep: SweepMembership = field(default_factory=SweepMembership)


@dataclass
class RunConfig(ExperimentConfig, AppOptions):
    """``zephon-run``'s schema: one :class:`ExperimentConfig` and the app's options.

    Registered as the Hydra structured config ``zephon_run_schema``, the first default of
    ``conf/config.yaml``: every key is typed, an unknown key or a wrong type fails with the
    key's name before anything starts, and ``conf/`` holds only presets that set values.
    """


APP_KEYS = tuple(f.name for f in fields(AppOptions))
"""Keys of ``zephon-run``'s config that belong to the app, not to the experiment."""
SCHEMA_NAME = "zephon_run_schema"


def _schema_node() -> DictConfig:
    """``RunConfig`` as Hydra's schema node, its name-keyed maps open: a command-line
    ``data.datasets={web:[...]}`` names datasets of its own, so it may bring new keys."""
    node = OmegaConf.structured(RunConfig)
    for key in OPEN_MAPS:
        OmegaConf.set_struct(OmegaConf.select(node, key), False)
    return node


OPEN_MAPS = (
    "data.datasets",
    "data.mixture",
    "data.eval_sets",
    "data.pretokenized",
    "data.io_options",
    "resources.slurm",
)
"""Maps whose keys are the user's or a library's (dataset names, the pipeline's remote IO
options, submitit parameters), not the schema's."""

ConfigStore.instance().store(name=SCHEMA_NAME, node=_schema_node())

HYDRA_PREFIXES = ("hydra.", "hydra/", "+", "~")
"""Command-line arguments that are Hydra's own (its settings, additions, deletions)."""


def command_line_problems(arguments: list[str], groups: set[str]) -> list[str]:
    """What is wrong with the ``key=value`` arguments of ``zephon-run``, before Hydra composes
    anything: a key that is no key of :class:`RunConfig` (a preset group of ``groups``,
    ``model=tiny``, selects a preset). Options and Hydra's own arguments are Hydra's to check."""
    problems = []
    for argument in arguments:
        key, equals, _ = argument.partition("=")
        if argument.startswith("-") or not equals or key.startswith(HYDRA_PREFIXES):
            continue
        if key in groups:
            continue
        computed = _computed_node(key, arguments, groups)
        if computed is not None:
            where, preset, value = computed
            problems.append(
                f"{argument}: the preset {preset} computes {where} ({value}), so no key can be "
                f"set inside it; set it whole instead, e.g. '{where}={{web:[/data/web/*.jsonl]}}'"
            )
            continue
        unknown = _unknown_part(key)
        if unknown is not None:
            where, known = unknown
            problems.append(
                f"{argument}: {where!r} is no key of zephon-run's config; "
                f"{'its' if '.' in where else 'the'} keys here: {', '.join(known)}"
            )
    return problems


def _computed_node(key: str, arguments: list[str], groups: set[str]) -> tuple[str, str, str] | None:
    """The node above ``key`` that the selected preset of its group computes (an
    interpolation such as ``data.datasets: ${zephon_local_corpus:3}``), where Hydra can set
    no key (it fails with an assertion): the node, ``group/preset`` and its value; None
    when there is none."""
    group, _, rest = key.partition(".")
    if group not in groups or "." not in rest:
        return None
    chosen = [a.partition("=")[2] for a in arguments if a.partition("=")[0] == group]
    preset = chosen[-1] if chosen else _default_preset(group)
    loaded = None if preset is None else load_preset(group, preset)
    if loaded is None:
        return None
    node: Any = OmegaConf.to_container(loaded, resolve=False)
    where = [group]
    for part in rest.split(".")[:-1]:
        if not isinstance(node, dict) or part not in node:
            return None
        node, where = node[part], [*where, part]
        if isinstance(node, str) and node.startswith("${"):
            return ".".join(where), f"{group}/{preset}", node
    return None


def _default_preset(group: str) -> str | None:
    """The preset of ``group`` that zephon-run's ``conf/config.yaml`` selects."""
    config = OmegaConf.create(
        (importlib.resources.files(PRESETS_PACKAGE) / "config.yaml").read_text()
    )
    for entry in config.get("defaults", []):
        if isinstance(entry, DictConfig) and group in entry:
            return str(entry[group])
    return None


def _unknown_part(key: str) -> tuple[str, list[str]] | None:
    """The first part of the dotted ``key`` that :class:`RunConfig` lacks, with the keys it
    has there; None when the key exists (or goes into a map of the user's own keys)."""
    kind: Any = RunConfig
    done: list[str] = []
    for part in key.split("."):
        if not dataclasses.is_dataclass(kind):
            return None  # a map or list of the user's (datasets, mixture, slurm ...)
        hints = typing.get_type_hints(kind)
        if part not in hints:
            return ".".join([*done, part]), sorted(hints)
        kind = hints[part]
        done.append(part)
    return None


def local_corpus(mb_per_domain: float) -> dict[str, list[str]]:
    """``${zephon_local_corpus:MB}``: build (or reuse) the local corpus under
    ``$ZEPHON_HOME/corpus-<MB>mb`` and return ``{domain: [shard paths]}``."""
    size = float(mb_per_domain)
    folder = zephon_home() / f"corpus-{size:g}mb"
    built = build_local_corpus(folder, max_bytes_per_domain=int(size * 1e6))
    return {name: [str(p) for p in paths] for name, paths in built.items()}


def local_tokenizer(mb_per_domain: float, vocab_size: int) -> str:
    """``${zephon_local_tokenizer:MB,VOCAB}``: a byte-level BPE of ``VOCAB`` tokens learned
    from the local corpus of :func:`local_corpus` (built once, under ``$ZEPHON_HOME``)."""
    corpus = {name: [Path(p) for p in paths] for name, paths in local_corpus(mb_per_domain).items()}
    folder = zephon_home() / f"corpus-{float(mb_per_domain):g}mb-bpe{int(vocab_size)}"
    # the spec a plan records (the tokenizer file), so the plan is the composed experiment
    return canonical_tokenizer_spec(
        str(build_local_tokenizer(corpus, folder, vocab_size=int(vocab_size)))
    )


def local_eval_set(mb_per_domain: float, domain: str, documents: int) -> str:
    """``${zephon_local_eval_set:MB,DOMAIN,N}``: a fixed evaluation set of ``N`` records of
    one domain of the local corpus (built once, :func:`demo.local_corpus.build_eval_set`)."""
    corpus = {name: [Path(p) for p in paths] for name, paths in local_corpus(mb_per_domain).items()}
    out = (
        zephon_home()
        / f"corpus-{float(mb_per_domain):g}mb-eval"
        / f"{domain}-{int(documents)}.jsonl"
    )
    return str(build_eval_set(corpus, str(domain), int(documents), out))


def local_noisy_corpus(mb_per_domain: float, domain: str, junk_per_record: float) -> dict:
    """``${zephon_local_noisy_corpus:MB,DOMAIN,JUNK}``: the local corpus of
    :func:`local_corpus` with ``DOMAIN`` replaced by a copy that has ``JUNK`` junk records
    per clean record between them (built once, :func:`demo.noisy_domain.build_noisy_domain`):
    data a quality filter has something to remove from."""
    corpus = local_corpus(mb_per_domain)
    junk = float(junk_per_record)
    out = zephon_home() / f"corpus-{float(mb_per_domain):g}mb-noisy" / f"{domain}-{junk:g}"
    paths = build_noisy_domain(
        {name: [Path(p) for p in paths] for name, paths in corpus.items()}, str(domain), junk, out
    )
    return {**corpus, str(domain): [str(p) for p in paths]}


if not OmegaConf.has_resolver("zephon_local_corpus"):
    OmegaConf.register_new_resolver("zephon_local_corpus", local_corpus, use_cache=True)
    OmegaConf.register_new_resolver("zephon_local_tokenizer", local_tokenizer, use_cache=True)
    OmegaConf.register_new_resolver("zephon_local_eval_set", local_eval_set, use_cache=True)
    OmegaConf.register_new_resolver("zephon_local_noisy_corpus", local_noisy_corpus, use_cache=True)


def split(cfg: DictConfig) -> tuple[dict[str, Any], AppOptions]:
    """The experiment part of ``cfg`` (resolved, as plain data) and the app's options."""
    experiment_keys = [k for k in cfg if k != "hydra" and k not in APP_KEYS]
    container = OmegaConf.to_container(OmegaConf.masked_copy(cfg, experiment_keys), resolve=True)
    assert isinstance(container, dict)
    app = OmegaConf.merge(
        OmegaConf.structured(AppOptions),
        OmegaConf.masked_copy(cfg, [k for k in APP_KEYS if k in cfg]),
    )
    options = OmegaConf.to_object(app)
    assert isinstance(options, AppOptions)
    return container, options


def experiment_from(cfg: DictConfig) -> ExperimentConfig:
    """The :class:`ExperimentConfig` of a composed config (unknown keys are errors)."""
    return load_experiment(split(cfg)[0])
