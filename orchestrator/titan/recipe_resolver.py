"""A run's recipe as TorchTitan resolves it: ``python -m orchestrator.titan.recipe_resolver FLAGS...``.

The recipe is everything that decides the training arithmetic apart from the data, read
from TorchTitan's own config parser on the trainer's flags; ``init`` is its part that
decides the initial weights, and ``shapes`` the model's parameter shapes (by TorchTitan and
Hugging Face names, to check a user's checkpoint against). Run as a module it prints
``{"recipe": ..., "init": ..., "shapes": ...}`` as JSON; a flag TorchTitan refuses exits
with status 2.

Design: docs/design/orchestrator_titan.md
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import io
import json
import logging
import re
import sys
from typing import Any

REPLICATE_FREE = {
    "dump_folder, hf_assets_path, profiler, metrics, comm": "where files go, what is observed, "
    "time-outs",
    "tokenizer, dataloader, training.seq_len, training.global_batch_size": "the data: compared "
    "by the data contract and the digests, not here",
    "parallelism": "the dp size and sharding layout: the lane pipeline gives every dp the same "
    "global batch, and the initial weights come from one seed checkpoint; only the order of "
    "floating-point sums changes",
    "training.local_batch_size": "the micro-batch size: gradient accumulation always covers one "
    "global batch per step; only the order of sums changes",
    "checkpoint, validator": "when state is saved and scores are taken (the guard compares "
    "scores at one common eval step)",
    "activation_checkpoint, compile, training.gc_freq, training.gc_debug, "
    "training.enable_cpu_offload, training.disable_cuda_graphs": "memory and speed",
}
"""What may differ between replicates without changing the recipe, and why. The launcher
and node count are not in TorchTitan's config at all."""
KEPT = ("model_spec", "optimizer", "lr_scheduler", "loss", "debug", "override")
"""Sections of TorchTitan's config kept whole in the recipe."""
TRAINING_KEPT = ("steps", "max_norm", "dtype", "mixed_precision_param", "mixed_precision_reduce")
"""Fields of ``training`` kept in the recipe."""
INIT_KEPT = ("model_spec", "debug", "override")
"""Sections that decide the initial weights (with ``training.dtype``)."""


def resolve(flags: list[str]) -> dict[str, Any]:
    """``{"recipe": ..., "init": ...}`` of the TorchTitan config ``flags`` give (see
    docs/design/orchestrator_titan.md). Raises ``ValueError`` with TorchTitan's message for
    a flag it refuses."""
    # deferred: cpu_compat imports torch, and must patch TorchTitan before it is imported
    from orchestrator.titan import cpu_compat

    cpu_compat.apply()
    from torchtitan.config.manager import ConfigManager

    logging.getLogger("torchtitan").setLevel(logging.ERROR)  # its warnings are about paths
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(errors):
            config = ConfigManager().parse_args(list(flags))
    except SystemExit as exit_:  # tyro's answer to an unknown or malformed flag
        raise ValueError(_tyro_message(errors.getvalue()) or f"exit {exit_.code}") from None
    plain = plain_data(config)
    recipe = {key: plain[key] for key in KEPT}
    recipe["training"] = {key: plain["training"][key] for key in TRAINING_KEPT}
    init = {key: plain[key] for key in INIT_KEPT}
    init["training"] = {"dtype": plain["training"]["dtype"]}
    return {"recipe": recipe, "init": init, "shapes": _parameter_shapes(config)}


def _parameter_shapes(config: Any) -> dict[str, dict[str, list[int]] | None]:
    """The shapes of the model's state dict, by TorchTitan name (``titan``) and, where the
    model has a state-dict adapter, by Hugging Face name (``hf``): what a checkpoint must
    hold to initialise it. The model is built on the meta device (no memory, no init)."""
    import torch

    spec = config.model_spec
    model_config = spec.model
    model_config.update_from_config(config=config)
    with torch.device("meta"):
        state = model_config.build().state_dict()
    shapes: dict[str, dict[str, list[int]] | None] = {
        "titan": {name: list(tensor.shape) for name, tensor in state.items()},
        "hf": None,
    }
    if spec.state_dict_adapter is not None:
        adapter = spec.state_dict_adapter(model_config, config.hf_assets_path)
        shapes["hf"] = {name: list(t.shape) for name, t in adapter.to_hf(state).items()}
    return shapes


def plain_data(value: Any, depth: int = 0) -> Any:
    """JSON-able, deterministic data of a config value: dataclasses by field, functions by
    qualified name and the values they close over (an init function's std), no addresses."""
    assert depth < 64, "config nests deeper than 64 levels"
    down = functools.partial(plain_data, depth=depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: down(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): down(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [down(v) for v in value]
    if isinstance(value, enum.Enum):
        return down(value.value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, functools.partial):
        return {
            "function": down(value.func),
            "args": down(value.args),
            "kwargs": down(value.keywords),
        }
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    if callable(value):
        name = f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', '?')}"
        cells = getattr(value, "__closure__", None) or ()
        return (
            {"function": name, "closure": [down(c.cell_contents) for c in cells]} if cells else name
        )
    return f"{type(value).__module__}.{type(value).__qualname__}"


def _tyro_message(text: str) -> str:
    """tyro's boxed error as plain lines (frame characters and help pointers dropped)."""
    lines = []
    for line in text.splitlines():
        line = re.sub(r"[│╭╮╰╯─━]+", " ", line).strip()
        noise = ("helptext", "--help", "Available subcommands", "initial_load_model_only")
        if re.search(r"[A-Za-z]", line) and not any(n in line for n in noise):
            lines.append(line)
    return " ".join(lines)


def main() -> None:
    """Print the recipe of the flags in ``sys.argv[1:]`` as JSON; exit 2 if TorchTitan refuses."""
    try:
        resolved = resolve(sys.argv[1:])
    except ValueError as error:
        print(str(error), file=sys.stderr)
        raise SystemExit(2) from None
    json.dump(resolved, sys.stdout, sort_keys=True)


if __name__ == "__main__":
    main()
