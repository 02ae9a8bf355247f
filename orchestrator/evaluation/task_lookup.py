"""Looking up lm-evaluation-harness task names, so an unknown task is refused when a run is
planned, not after it has trained (:mod:`orchestrator.evaluation.lm_eval_adapter` runs them)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import lm_eval.tasks

from pipeline import ConfigError

GENERATION_REFUSED = (
    "generation tasks (output_type: generate_until) are not supported by Zephon's task "
    "evaluation; use multiple-choice (multiple_choice, loglikelihood) or perplexity "
    "(loglikelihood_rolling) tasks"
)


def folder_hint(task_dir: Path | None) -> str:
    """Where the task folder is, for messages."""
    return f", now {task_dir}" if task_dir is not None else ", not set"


def task_manager(tasks: Sequence[str], task_dir: Path | None) -> lm_eval.tasks.TaskManager:
    """A task manager knowing every name of ``tasks``, none of them a generation task (a
    group's tasks are known only once loaded); lm-eval's built-ins only if needed."""
    if task_dir is not None and not Path(task_dir).is_dir():
        raise ConfigError(f"task folder (eval.task_dir) {task_dir} is not a directory")
    local = lm_eval.tasks.TaskManager(
        include_path=str(task_dir) if task_dir is not None else None, include_defaults=False
    )
    if all(name in local.task_index for name in tasks):
        manager = local
    else:
        manager = _with_builtin_tasks(str(task_dir) if task_dir is not None else None)
    unknown = [name for name in tasks if name not in manager.task_index]
    if unknown:
        raise ConfigError(
            f"unknown lm-eval task(s) {', '.join(map(repr, unknown))}: neither in the task "
            f"folder (eval.task_dir{folder_hint(task_dir)}) nor among lm-eval's built-in "
            "tasks; put the task's YAML in the task folder"
        )
    generating = [n for n in tasks if _output_type(manager, n) == "generate_until"]
    if generating:
        raise ConfigError(
            f"lm-eval task(s) {', '.join(map(repr, generating))}: {GENERATION_REFUSED}"
        )
    return manager


def _output_type(manager: lm_eval.tasks.TaskManager, name: str) -> str | None:
    """The ``output_type`` of task ``name``'s config, includes resolved (None for a group)."""
    config = getattr(manager.task_index[name], "cfg", None) or {}
    return config.get("output_type")


@functools.lru_cache(maxsize=4)
def _with_builtin_tasks(task_dir: str | None) -> lm_eval.tasks.TaskManager:
    # Indexing lm-eval's ~15,000 built-in task names takes seconds: once per process.
    return lm_eval.tasks.TaskManager(include_path=task_dir, include_defaults=True)
