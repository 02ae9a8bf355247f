"""TorchTitan configs on the lane pipeline, for ``--module orchestrator.titan.configs --config FN``.

``zephon_config(base, dataloader, tokenizer)`` turns any TorchTitan
``Trainer.Config`` into a ``ZephonTrainer.Config`` with the given data loader and
tokenizer, TorchTitan's other settings unchanged except the model vocabulary,
which follows the tokenizer (``--tokenizer.name``, whatever it is set to).
"""

from __future__ import annotations

from dataclasses import fields, replace

import torch
from torchtitan.models import llama3
from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm, compute_ffn_hidden_dim
from torchtitan.models.llama3.config_registry import llama3_debugmodel
from torchtitan.models.llama3.model import Llama3Model
from torchtitan.trainer import Trainer

from orchestrator.evaluation.evaluator import HeldOutEvaluator
from orchestrator.experiment import DataSection
from orchestrator.machine.precision import resolve_precision
from orchestrator.titan.dataloader import ZephonDataLoader
from orchestrator.titan.tokenizer import ZephonTokenizer
from orchestrator.titan.trainer import ZephonTrainer


def zephon_config(
    base: Trainer.Config, dataloader: ZephonDataLoader.Config, tokenizer: str = "gpt2"
) -> ZephonTrainer.Config:
    """``base`` fed by ``dataloader`` and ``tokenizer``, its model vocabulary sized to it."""
    settings = {f.name: getattr(base, f.name) for f in fields(base) if f.init}
    settings.update(
        tokenizer=ZephonTokenizer.Config(name=tokenizer),
        dataloader=dataloader,
        validator=HeldOutEvaluator.Config(freq=base.validator.freq),
        vocab_follows_tokenizer=True,
    )
    assert base.model_spec is not None, "the base config has no model_spec"
    return ZephonTrainer.Config(**settings)


def zephon_debug() -> ZephonTrainer.Config:
    """TorchTitan's llama3 ``debugmodel`` (gpt2 vocabulary: 30.8 M parameters) on short
    sequences, for CPU runs and CI. Set ``--dataloader.spec`` (the data: ``zephon run``
    writes it); the default data section has 4 lanes (dp 1, 2 or 4) and 8 sequences of 128
    tokens per step, here 2 per micro-batch;
    precision as ``train.precision=auto`` resolves it (:mod:`orchestrator.machine.precision`).
    ``partial_dtensor``: the default ``spmd_types`` backend fails with dp > 1 on torch 2.13.
    """
    return _on_short_sequences(llama3_debugmodel())


def zephon_mini(dim: int = 64, n_heads: int = 4, n_layers: int = 2) -> ZephonTrainer.Config:
    """:func:`zephon_debug` with a small llama3 (by default 64 wide, 4 heads, 2 layers; gpt2
    vocabulary: 6.6 M parameters, a fifth of the arithmetic per token): for tests and smoke
    runs, where what is checked is the data and the bookkeeping, not what the model learns."""
    base = llama3_debugmodel()
    assert base.model_spec is not None, "llama3_debugmodel has no model_spec"
    model = _mini_llama3(dim, n_heads, n_layers)
    base.model_spec = replace(base.model_spec, flavor="zephon_mini", model=model)
    # No activation checkpointing: its recomputation was ~a third of a CPU step of this
    # model, whose activations are small; memory and speed only, not part of the recipe.
    base.activation_checkpoint = None
    return _on_short_sequences(base)


def zephon_small() -> ZephonTrainer.Config:
    """:func:`zephon_mini` twice as wide and twice as deep (128 wide, 4 heads, 4 layers): the
    rung above it in a ladder across model sizes (``hydra.sweeper.replicate_models``)."""
    return zephon_mini(dim=128, n_heads=4, n_layers=4)


def _on_short_sequences(base: Trainer.Config) -> ZephonTrainer.Config:
    """``base`` on the lane pipeline with the CPU-sized schedule of :func:`zephon_debug`."""
    config = zephon_config(base, ZephonDataLoader.Config())
    config.training.seq_len = DataSection.seq_len  # the data contract's default
    config.training.local_batch_size = 2
    config.training.steps = 12
    config.parallelism.spmd_backend = "partial_dtensor"
    config.debug.seed = 42
    # float32 where bfloat16 is emulated (tenfold slower); --training.mixed-precision-param wins
    config.training.mixed_precision_param = resolve_precision(
        "auto", "cuda" if torch.cuda.is_available() else "cpu"
    )
    return config


def _mini_llama3(dim: int, n_heads: int, n_layers: int) -> Llama3Model.Config:
    """TorchTitan's ``debugmodel`` recipe (flex attention, its initialisations) at ``dim``,
    ``n_heads`` heads, ``n_layers`` layers; the vocabulary is sized later by
    :func:`zephon_config`."""
    vocab = 2048
    return Llama3Model.Config(
        dim=dim,
        vocab_size=vocab,
        tok_embeddings=Embedding.Config(
            num_embeddings=vocab, embedding_dim=dim, param_init=llama3._EMBEDDING_INIT
        ),
        norm=RMSNorm.Config(normalized_shape=dim, param_init=llama3._NORM_INIT),
        lm_head=Linear.Config(
            in_features=dim, out_features=vocab, param_init=llama3._output_linear_init(dim)
        ),
        layers=llama3._build_llama3_layers(
            fuse_qkv=True,
            n_layers=n_layers,
            dim=dim,
            n_heads=n_heads,
            hidden_dim=compute_ffn_hidden_dim(dim, multiple_of=64),
            rope=ComplexRoPE.Config(
                dim=dim // n_heads, max_seq_len=131072, theta=500000, scaling="llama"
            ),
            attn_backend="flex",
        ),
    )
