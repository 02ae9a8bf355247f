"""The one place where TorchTitan 0.3.0 is prepared for CPU-only machines and torch 2.13.

Each patch fixes one failure of TorchTitan on a CPU-only torch 2.13, checks its own
condition first, and changes only runtime objects, never installed files. ``apply()`` is
idempotent and must run before TorchTitan's modules are imported (``orchestrator.titan``
calls it on import).

Design: docs/design/orchestrator_titan.md
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import resource
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist

_applied: list[str] | None = None

# Modules that copy ``device_type``/``device_module`` out of ``torchtitan.tools.utils`` at
# import time; the rebinding has no effect on them once they are imported.
_BINDS_DEVICE_AT_IMPORT = (
    "torchtitan.components.metrics",
    "torchtitan.distributed.parallel_dims",
    "torchtitan.distributed.utils",
    "torchtitan.models.common.token_dispatcher",
    "torchtitan.tools.profiler",
)
_TRITON_MODULE = "torchtitan.distributed.minimal_async_ep.kernels"


def apply() -> list[str]:
    """Apply every patch whose condition holds; return the names of those applied."""
    global _applied
    if _applied is None:
        applied = []
        if not hasattr(dist, "set_timeout"):
            dist.set_timeout = dist.distributed_c10d._set_pg_timeout
            applied.append("set_timeout alias")
        if importlib.util.find_spec("triton") is None and _TRITON_MODULE not in sys.modules:
            sys.modules[_TRITON_MODULE] = _triton_stub(_TRITON_MODULE)
            applied.append("triton stub")
        if torch._utils._get_available_device_type() is None:
            _use_cpu_device()
            _use_sdpa_for_flex_attention()
            applied += ["cpu device", "flex -> SDPA"]
        _force_sum_reduction_on_gloo()
        applied.append("FSDP sum reduction (gloo only)")
        _applied = applied
    return list(_applied)


# -- triton --------------------------------------------------------------------------------------


def _triton_stub(name: str) -> types.ModuleType:
    """A module whose every attribute is a function that explains why it cannot run."""
    stub = types.ModuleType(name, "Stand-in installed by orchestrator.titan.cpu_compat.")

    def missing(attribute: str) -> Callable[..., Any]:
        if attribute.startswith("__"):  # module protocol (__file__, __path__, ...): absent
            raise AttributeError(attribute)

        def unavailable(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(
                f"{name}.{attribute} needs triton (CUDA), which is not installed; "
                "MinimalAsyncEP expert parallelism cannot run on this machine"
            )

        return unavailable

    stub.__getattr__ = missing  # type: ignore[method-assign]
    return stub


# -- cpu device ----------------------------------------------------------------------------------


class _CpuDeviceModule:
    """What TorchTitan calls on ``torch.cuda`` when the device is the CPU.

    Memory statistics report the process's peak resident set size, so TorchTitan's
    memory metrics stay meaningful.
    """

    @staticmethod
    def set_device(device: torch.device | int) -> None:
        """No-op: a CPU process has one device."""

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def synchronize(device: torch.device | int | None = None) -> None:
        """No-op: CPU kernels are synchronous."""

    @staticmethod
    def empty_cache() -> None:
        """No-op: no caching allocator."""

    @staticmethod
    def reset_peak_memory_stats(device: torch.device | int | None = None) -> None:
        """No-op: the peak RSS cannot be reset."""

    @staticmethod
    def get_device_name(device: torch.device | int | None = None) -> str:
        return "cpu"

    @staticmethod
    def get_device_properties(device: torch.device | int | None = None) -> types.SimpleNamespace:
        return types.SimpleNamespace(
            name="cpu", total_memory=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        )

    @staticmethod
    def memory_stats(device: torch.device | int | None = None) -> dict[str, int]:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        return {
            "active_bytes.all.peak": peak,
            "reserved_bytes.all.peak": peak,
            "num_alloc_retries": 0,
            "num_ooms": 0,
        }


def _use_cpu_device() -> None:
    """Rebind TorchTitan's import-time device choice from "cuda" to "cpu"."""
    bound = sorted(m for m in _BINDS_DEVICE_AT_IMPORT if m in sys.modules)
    if bound:
        raise RuntimeError(
            f"orchestrator.titan.cpu_compat.apply() must run before TorchTitan modules {bound} are "
            "imported; import orchestrator.titan first"
        )
    from torchtitan.tools import utils

    utils.device_type = "cpu"
    utils.device_module = _CpuDeviceModule()


# -- flex attention ------------------------------------------------------------------------------


def _use_sdpa_for_flex_attention() -> None:
    """Run TorchTitan's FlexAttention as SDPA with a dense mask (forward and backward on CPU).

    The block masks are then only carriers of their ``mask_mod`` (:func:`mask_carrier`):
    compiling ``create_block_mask`` costs each process ~5 s at its first step, and the eager
    one evaluates the mask_mod per block, ~20 ms a forward, for block tables nothing reads.
    """
    with _torch_compile_left_out():
        from torchtitan.models.common import attention

    attention.FlexAttention.compiled_flex_attn = staticmethod(_flex_as_sdpa)
    attention._compiled_create_block_mask = mask_carrier


def mask_carrier(
    mask_mod: Callable[..., torch.Tensor],
    B: int | None,
    H: int | None,
    Q_LEN: int,
    KV_LEN: int,
    device: torch.device | str = "cpu",
    BLOCK_SIZE: int | tuple[int, int] = 128,
    **options: Any,
) -> Any:
    """A ``BlockMask`` of ``mask_mod`` with every block listed, in ``create_block_mask``'s
    signature: what :func:`_flex_as_sdpa` reads of it (its ``mask_mod`` and shape) is
    exact, its block tables are not (0.7 ms for 8 x 128 x 128 where the eager
    ``create_block_mask`` took 20 ms, 2-core AMD EPYC). ``options`` (``separate_full_blocks``,
    ``_compile``) concern the block tables only."""
    from torch.nn.attention.flex_attention import BlockMask

    del options
    q_block, kv_block = (BLOCK_SIZE, BLOCK_SIZE) if isinstance(BLOCK_SIZE, int) else BLOCK_SIZE
    q_blocks, kv_blocks = -(-Q_LEN // q_block), -(-KV_LEN // kv_block)
    batch, heads = B or 1, H or 1
    counts = torch.full((batch, heads, q_blocks), kv_blocks, dtype=torch.int32, device=device)
    indices = torch.arange(kv_blocks, dtype=torch.int32, device=device)
    indices = indices.expand(batch, heads, q_blocks, kv_blocks).contiguous()
    return BlockMask.from_kv_blocks(
        counts,
        indices,
        BLOCK_SIZE=(q_block, kv_block),
        mask_mod=mask_mod,
        seq_lengths=(Q_LEN, KV_LEN),
    )


@contextlib.contextmanager
def _torch_compile_left_out() -> Iterator[None]:
    """``torch.compile(f)`` returns ``f`` meanwhile.

    TorchTitan's attention module compiles flex attention and ``create_block_mask`` at
    import, which imports the inductor backend: ~0.9 s of CPU in every process that imports
    the trainer (2 cores, 5 interleaved runs: 6.3 s instead of 7.3 s), for two functions
    that :func:`_use_sdpa_for_flex_attention` replaces at once on CPU.
    """

    def not_compiled(model: Callable | None = None, **options: Any) -> Any:
        return model if model is not None else (lambda function: function)

    compile_function = torch.compile
    torch.compile = not_compiled
    try:
        yield
    finally:
        torch.compile = compile_function


def _flex_as_sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    score_mod: Callable | None,
    block_mask: Any,
    scale: float | None,
    enable_gqa: bool,
    return_aux: Any,
    kernel_options: dict,
) -> tuple[torch.Tensor, Any]:
    """Same contract as ``FlexAttention.compiled_flex_attn`` (q, k, v are [B, N, L, H])."""
    from torch.nn.attention.flex_attention import AuxOutput

    if score_mod is not None:
        raise NotImplementedError("cpu_compat's SDPA stand-in for FlexAttention has no score_mod")
    batch, q_len, kv_len = q.shape[0], q.shape[-2], k.shape[-2]
    mask = None
    if block_mask is not None:
        shape = (block_mask.shape[0], 1, q_len, kv_len)
        mask = dense_mask(block_mask.mask_mod, shape, q.device).expand(batch, 1, q_len, kv_len)
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=scale, enable_gqa=enable_gqa
    )
    lse = None
    if return_aux is not None and return_aux.lse:
        if enable_gqa:
            k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        scores = (q @ k.transpose(-2, -1)) * (scale if scale is not None else q.shape[-1] ** -0.5)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        lse = torch.logsumexp(scores.float(), dim=-1)
    return out, AuxOutput(lse=lse)


def dense_mask(
    mask_mod: Callable[..., torch.Tensor], shape: tuple[int, int, int, int], device: torch.device
) -> torch.Tensor:
    """The boolean mask ``shape = (batch, heads, q_len, kv_len)`` of a FlexAttention
    ``mask_mod``, as ``create_mask`` gives it.

    TorchTitan's mask_mods (causal, document, packed-document, sliding window, fixed
    block, and their ``and_masks``) are elementwise tensor expressions, so one call on
    broadcast index grids computes every entry: 0.2 ms for 8 x 128 x 128 where
    ``create_mask``, which vmaps the mask_mod, took 3.2 ms (per layer and forward; a
    held-out forward of ``zephon_mini`` took ~25 ms in all, 2-core AMD EPYC). A mask_mod
    that does not broadcast (indexes combined as if they were scalars) goes through
    ``create_mask``.
    """
    from torch.nn.attention.flex_attention import create_mask

    grids = [
        torch.arange(size, device=device).view([-1 if d == i else 1 for d in range(4)])
        for i, size in enumerate(shape)
    ]
    try:
        mask = mask_mod(*grids)
        fits = mask.dtype == torch.bool and torch.broadcast_shapes(mask.shape, shape) == shape
    except (RuntimeError, IndexError, TypeError, AttributeError):  # not elementwise
        fits = False
    return mask.expand(shape) if fits else create_mask(mask_mod, *shape, device=device)


# -- FSDP on gloo --------------------------------------------------------------------------------


def _force_sum_reduction_on_gloo() -> None:
    """Make TorchTitan's post-FSDP hook also select sum-only reductions when FSDP runs on gloo.

    ``apply_fsdp_to_decoder`` calls ``disable_fsdp_gradient_division(model)`` once all
    modules are sharded; wrapping that module-level function reaches every FSDP module.
    """
    from torch.distributed.fsdp import FSDPModule
    from torchtitan.distributed import fsdp

    original = fsdp.disable_fsdp_gradient_division

    def disable_division_and_force_sum(model: torch.nn.Module) -> None:
        original(model)
        if dist.is_initialized() and dist.get_backend() == "gloo":
            for module in model.modules():
                if isinstance(module, FSDPModule):
                    module.set_force_sum_reduction_for_comms(True)

    fsdp.disable_fsdp_gradient_division = disable_division_and_force_sum
