"""``orchestrator.titan.cpu_compat`` on this machine (CPU-only or CUDA, torch 2.13), and run-log names."""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.distributed as dist
from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, flex_attention

from orchestrator.titan import cpu_compat
from orchestrator.titan.runlog import metric_name
from tests.support.processes import run_python_probe


def test_patches_apply_where_their_condition_holds() -> None:
    from torchtitan.tools import utils

    applied = cpu_compat.apply()
    assert cpu_compat.apply() == applied  # idempotent
    assert "set_timeout alias" in applied and hasattr(dist, "set_timeout")
    accelerator = torch._utils._get_available_device_type()
    if accelerator is None:  # a CPU-only machine: TorchTitan is moved to the CPU
        assert {"cpu device", "flex -> SDPA"} <= set(applied)
        assert utils.device_type == "cpu"
    else:  # a GPU machine: TorchTitan's own device, its own attention
        assert not {"cpu device", "flex -> SDPA"} & set(applied)
        assert utils.device_type == accelerator
    assert ("triton stub" in applied) == (importlib.util.find_spec("triton") is None)


@pytest.mark.skipif(
    torch._utils._get_available_device_type() is not None,
    reason="the SDPA stand-in is installed on CPU-only machines only",
)
def test_the_cpu_trainer_imports_no_compiler_and_leaves_torch_compile_alone() -> None:
    """TorchTitan's import-time torch.compile calls are skipped on CPU (their results are
    replaced by the stand-in), so a trainer process does not import the inductor backend."""
    probe = (
        "import sys, torch; compile_function = torch.compile\n"
        "import orchestrator.titan.trainer, torchtitan.trainer\n"
        "assert torch.compile is compile_function, 'torch.compile was not restored'\n"
        "print(sorted(m for m in sys.modules if m.startswith('torch._inductor.compile_fx')))"
    )
    assert run_python_probe(probe) == "[]"


@pytest.mark.skipif(
    torch._utils._get_available_device_type() is not None,
    reason="the SDPA stand-in is installed on CPU-only machines only",
)
def test_sdpa_stand_in_matches_flex_attention() -> None:
    from torchtitan.models.common.attention import (
        FlexAttention,
        get_causal_mask_mod,
        get_efficient_causal_mask_mod_for_packed_document,
    )
    from torchtitan.tools.utils import device_type

    # Two rows of 12 tokens with documents starting at (0, 5) and (0, 3, 9).
    positions = torch.tensor(
        [[0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 0, 1, 2, 3, 4, 5, 0, 1, 2]]
    )
    causal, document = (
        get_causal_mask_mod(),
        get_efficient_causal_mask_mod_for_packed_document(positions),
    )

    def mask_mod(
        b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor
    ) -> torch.Tensor:
        return causal(b, h, q, kv) & document(b, h, q, kv)

    block_mask = create_block_mask(mask_mod, 2, None, 12, 12, device=device_type)
    q, k, v = (torch.randn(2, 4, 12, 8, dtype=torch.float64) for _ in range(3))
    want, want_aux = flex_attention(q, k, v, block_mask=block_mask, return_aux=AuxRequest(lse=True))
    # the trainer's block masks are carriers of their mask_mod (every block listed)
    carrier = cpu_compat.mask_carrier(mask_mod, 2, None, 12, 12, device=device_type, BLOCK_SIZE=8)
    assert carrier.shape == block_mask.shape and carrier.mask_mod is mask_mod
    for given in (block_mask, carrier):
        got, got_aux = FlexAttention.compiled_flex_attn(
            q,
            k,
            v,
            score_mod=None,
            block_mask=given,
            scale=None,
            enable_gqa=False,
            return_aux=AuxRequest(lse=True),
            kernel_options={},
        )
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(got_aux.lse, want_aux.lse.to(got_aux.lse.dtype))


def test_metric_names_are_safe_for_trackers() -> None:
    assert metric_name("throughput(tps)") == "throughput_tps"
    assert metric_name("time_metrics/data_loading(%)") == "time_metrics/data_loading_pct"
    assert metric_name("memory/max_active(GiB)") == "memory/max_active_GiB"
    assert metric_name("loss_metrics/global_avg_loss") == "loss_metrics/global_avg_loss"


def test_dense_mask_is_create_masks_for_torchtitans_mask_mods() -> None:
    from torch.nn.attention.flex_attention import and_masks, create_mask
    from torchtitan.models.common.attention import (
        get_causal_mask_mod,
        get_document_mask_mod,
        get_efficient_causal_mask_mod_for_packed_document,
        get_fixed_block_mask_mod,
        get_sliding_window_mask_mod,
    )

    generator = torch.Generator().manual_seed(0)
    for batch in (1, 3):
        starts = torch.rand(batch, 40, generator=generator) < 0.1
        starts[:, 0] = True
        index = torch.arange(40).expand(batch, 40)
        last_start = torch.cummax(torch.where(starts, index, 0), dim=1).values
        positions = index - last_start  # reset to 0 at every document start
        causal = get_causal_mask_mod()
        mask_mods = {
            "causal": causal,
            "document": and_masks(causal, get_document_mask_mod(positions)),
            "packed document": and_masks(
                causal, get_efficient_causal_mask_mod_for_packed_document(positions)
            ),
            "fixed block": get_fixed_block_mask_mod(7),
            "sliding window": and_masks(causal, get_sliding_window_mask_mod(5)),
        }
        for name, mask_mod in mask_mods.items():
            want = create_mask(mask_mod, batch, 1, 40, 40, device="cpu")
            got = cpu_compat.dense_mask(mask_mod, (batch, 1, 40, 40), torch.device("cpu"))
            assert torch.equal(got, want), (name, batch)
            assert want.any() and not want.all(), name  # the masks are not trivial


def test_dense_mask_of_a_mask_mod_that_does_not_broadcast_is_vmapped() -> None:
    from torch.nn.attention.flex_attention import create_mask

    def stacks_its_indexes(
        b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor
    ) -> torch.Tensor:
        return torch.stack([q, kv]).amax(dim=0) % 3 == 0  # needs equal shapes: vmap only

    got = cpu_compat.dense_mask(stacks_its_indexes, (2, 1, 9, 9), torch.device("cpu"))
    assert torch.equal(got, create_mask(stacks_its_indexes, 2, 1, 9, 9, device="cpu"))
