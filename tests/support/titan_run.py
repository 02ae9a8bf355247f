"""Real ``torchrun`` launches of TorchTitan on CPU (gloo) for the titan tests, and their results.

Every launch is started as Zephon starts a CPU launch (forked from its warm server, in its
own process group, killed whole after a wall-clock limit) and a failed launch shows the
tail of its log. Runs share one small real corpus (``build_local_corpus(...,
max_bytes_per_domain=300_000)``) and read their results from the run folder:
``zephon/steps.jsonl`` (digests) and ``zephon/metrics.jsonl`` (losses).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from demo.local_corpus import build_local_corpus
from orchestrator.experiment import DataSection, write_data_spec
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.machine.devices import discover
from orchestrator.run.launch import Launch, free_port, run_local, train_command
from orchestrator.run.launch import launch_env as launch_env_of_run
from orchestrator.run.trainer_command import c10d_rendezvous
from orchestrator.titan.runlog import METRICS_FILE, RUN_SUBDIR, STEPS_FILE, read_jsonl
from pipeline import Dataset, WorkSource
from tests.support import REPO
from tests.support.tokenizers import EOS, train_byte_level_bpe

RUN_TIMEOUT_S = 300
"""Limit of one launch; a healthy one takes 10-60 s on 2 cores."""
CORPUS_BYTES_PER_DOMAIN = 300_000
CORPUS_FOLDER = "titan-corpus"
"""The shared corpus's folder under the root given to :func:`corpus`."""
MIXTURE = {"code": 0.5, "docs": 0.3}
"""Token shares of the named domains; the third domain (``unicode``) gets the rest."""


@dataclass
class Run:
    """A finished launch: its run folder, exit status and output."""

    folder: Path
    returncode: int
    output: str

    def tail(self, lines: int = 80) -> str:
        return "\n".join(self.output.splitlines()[-lines:])

    def check(self) -> Run:
        """Fail the test with the log tail unless the launch succeeded."""
        assert self.returncode == 0, f"launch failed ({self.returncode}):\n{self.tail()}"
        return self

    def digests(self) -> dict[int, str]:
        """TorchTitan step -> global batch digest."""
        return {step: r["global_digest"] for step, r in self.steps().items()}

    def steps(self) -> dict[int, dict[str, Any]]:
        """TorchTitan step -> its line of ``steps.jsonl``."""
        return {r["step"]: r for r in read_jsonl(self.folder / RUN_SUBDIR / STEPS_FILE)}

    def losses(self) -> dict[int, float]:
        """TorchTitan step -> global average loss (``--metrics.log-freq 1``)."""
        key = "loss_metrics/global_avg_loss"
        records = read_jsonl(self.folder / RUN_SUBDIR / METRICS_FILE)
        return {r["step"]: r[key] for r in records if key in r}


def corpus(root: Path) -> dict[str, list[Path]]:
    """The shared small corpus (built once; later calls return at once)."""
    return build_local_corpus(root / CORPUS_FOLDER, max_bytes_per_domain=CORPUS_BYTES_PER_DOMAIN)


CORPUS_VOCAB = 1024
"""Vocabulary of :func:`corpus_tokenizer`. With gpt2's 50,257 tokens the output layer and
its gradients are most of a ``zephon_mini`` step; with 1,024 a step takes about half."""


def corpus_tokenizer(domains: dict[str, list[Path]]) -> str:
    """``data.tokenizer`` for training tests on the shared corpus ``domains``
    (:func:`tests.support.titan_run.corpus`), whose evidence is the data and the bookkeeping,
    not gpt2: a byte-level BPE of :data:`CORPUS_VOCAB` tokens trained on that corpus, with a
    tokenizer_config.json naming its EOS, in a folder beside it (trained once)."""
    corpus_root = Path(min(p for paths in domains.values() for p in paths)).parents[1]
    assert corpus_root.name == CORPUS_FOLDER, (
        f"corpus_tokenizer takes the shared corpus of tests.support.titan_run.corpus, "
        f"whose shards lie in <root>/{CORPUS_FOLDER}/<domain>/, not {corpus_root}"
    )
    folder = corpus_root.with_name("corpus-bpe")
    if not (folder / "tokenizer_config.json").exists():
        with tempfile.TemporaryDirectory() as index_cache:
            datasets = [
                Dataset(name, [str(p) for p in paths], cache_dir=index_cache)
                for name, paths in sorted(domains.items())
            ]
            # the first 100 kB of every domain, read as the pipeline reads it
            source = WorkSource(datasets, dict.fromkeys(domains, 1.0), holdout_bytes=100_000)
            texts = [text for d in range(len(datasets)) for text in source.heldout_documents(d)]
        train_byte_level_bpe(texts, folder, vocab_size=CORPUS_VOCAB)
        # written last: its presence says the folder is complete
        (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": EOS}))
    return str(folder)


def zephon_data_args(
    domains: dict[str, list[Path]], work: Path, tokenizer: str = "gpt2"
) -> list[str]:
    """``--dataloader.spec work/data.json`` (written for the corpus: one dataset per domain,
    the test mixture, ``tokenizer``, no held-out text, shard indexes cached in
    ``work/index-cache`` and tokens in ``work/token-cache``: a module's first run fills it,
    the others read it) and ``--tokenizer.name``, which must agree with it."""
    third = round(1.0 - sum(MIXTURE.values()), 6)
    data = DataSection(
        datasets={name: [str(p) for p in paths] for name, paths in domains.items()},
        mixture={name: MIXTURE.get(name, third) for name in domains},
        holdout_bytes=0,
        tokenizer=tokenizer,
        cache_dir=str(work / "index-cache"),
        token_cache_dir=str(work / "token-cache"),
    )
    write_data_spec(work / "data.json", data)
    return ["--dataloader.spec", str(work / "data.json"), "--tokenizer.name", tokenizer]


def launch_env(work: Path) -> dict[str, str]:
    """Zephon's launch environment (CPU, its malloc settings, no network) with caches shared
    inside ``work`` and one thread per process (up to 4 processes share 2 cores)."""
    return {
        **launch_env_of_run(RunFolder(work), discover("cpu"), 1),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "HF_HOME": str(work / "hf"),
        "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor"),
        "OMP_NUM_THREADS": "1",
    }


def launch(
    work: Path,
    folder: Path,
    nproc: int,
    args: list[str],
    *,
    module: str = "orchestrator.titan.configs",
    config: str = "zephon_mini",
    nodes: int = 1,
) -> Run:
    """Train with ``nproc`` processes on each of ``nodes`` torchrun agents (c10d on loopback),
    started as Zephon starts a CPU launch (:func:`orchestrator.run.launch.run_local`: forked
    from its warm server, output in the folder's ``launch.log``)."""
    env = launch_env(work)
    flags = [
        *("--module", module, "--config", config, "--dump-folder", str(folder)),
        *("--metrics.log-freq", "1"),
        *("--comm.train-timeout-seconds", "600"),  # 4 processes on 2 cores: a step takes seconds
        *args,
    ]
    if nodes == 1:
        commands = [train_command(nproc, flags)]
    else:
        endpoint = f"127.0.0.1:{free_port()}"
        commands = [
            train_command(
                nproc,
                flags,
                c10d_rendezvous(nodes, node, endpoint=endpoint, run_id=folder.name),
            )
            for node in range(nodes)
        ]
    run_folder = RunFolder(folder)
    code = run_local(Launch(commands, env, run_folder, timeout_s=RUN_TIMEOUT_S))
    return Run(folder, code, run_folder.log_path.read_text(errors="replace"))
