"""The contrast: the same experiment with TorchTitan 0.3.0's stock data loader.

Documents what users of the stock ``HuggingFaceTextDataLoader`` suffer today, on
the same corpus, model and schedule (``tests.support.titan_configs.stock_mini``), so a
change in TorchTitan's behaviour shows up here:

* its checkpoint holds one reader position per data-parallel rank
  (``dataloader.dp_rank_<r>``) plus ``world_size``; resuming on another dp size is
  refused: on 1 process by its assertion "dataloader resharding is not supported
  yet", on 4 processes already by DCP, because ranks 2 and 3 find no
  ``dp_rank_2``/``dp_rank_3`` entry;
* the only way past that is to skip the data state
  (``--checkpoint.exclude-from-loading dataloader``), and then the data silently
  restarts from the beginning: steps 7..12 train again on the batches of steps 1..6.

The stock run only needs to reach its checkpoint (6 steps): every resume is refused
or restarts. The lane pipeline, by contrast, refuses this checkpoint with a message
saying what it is (last test) and resumes its own on any dp size
(``test_titan_elastic.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline import Dataset
from tests.support.titan_run import Run, corpus, launch, zephon_data_args

CHECKPOINT_STEP = 6


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("titan-stock")


@pytest.fixture(scope="module")
def domains(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    return corpus(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="module")
def stock_dataset(work: Path, domains: dict[str, list[Path]]) -> Path:
    """The documents the lane pipeline reads, as a local JSON dataset for ``load_dataset(dir)``."""
    folder = work / "json-dataset"
    folder.mkdir()
    with (folder / "train.json").open("w") as f:
        for name, paths in sorted(domains.items()):
            dataset = Dataset(name, paths, cache_dir=work)
            texts = dataset.read_texts(range(dataset.num_records))
            f.writelines(json.dumps({"text": text}) + "\n" for text in texts)
    return folder


def stock_launch(work: Path, name: str, nproc: int, dataset: Path, *args: str) -> Run:
    folder = work / name
    folder.mkdir()
    return launch(
        work,
        folder,
        nproc,
        [
            *("--dataloader.dataset-path", str(dataset), "--dataloader.record-dir", str(folder)),
            *args,
        ],
        module="tests.support.titan_configs",
        config="stock_mini",
    )


def batches(run: Run, rank: int) -> list[str]:
    """Digests of the batches dp rank ``rank`` yielded, in order (one per step here)."""
    lines = (run.folder / f"batches.dp{rank}.jsonl").read_text().splitlines()
    return [json.loads(line)["batch"] for line in lines]


@pytest.fixture(scope="module")
def stock_run(work: Path, stock_dataset: Path) -> Run:
    """6 steps on 2 processes (local batch 4, global 8), full checkpoint at step 6."""
    return stock_launch(
        work,
        "stock-dp2",
        2,
        stock_dataset,
        *("--training.steps", str(CHECKPOINT_STEP), "--training.local-batch-size", "4"),
        *("--checkpoint.enable", "--checkpoint.interval", str(CHECKPOINT_STEP)),
    ).check()


def checkpoint(run: Run) -> str:
    return str(run.folder / "checkpoint" / f"step-{CHECKPOINT_STEP}")


@pytest.mark.parametrize(
    ("nproc", "local_batch", "refusal"),
    [
        (1, "8", "dataloader resharding is not supported yet"),
        (4, "2", "Missing key in checkpoint state_dict: dataloader.dp_rank_2"),
    ],
    ids=["dp1", "dp4"],
)
def test_stock_loader_refuses_to_resume_on_another_dp_size(
    work: Path, stock_dataset: Path, stock_run: Run, nproc: int, local_batch: str, refusal: str
) -> None:
    resumed = stock_launch(
        work,
        f"stock-resume-dp{nproc}",
        nproc,
        stock_dataset,
        *("--training.steps", str(2 * CHECKPOINT_STEP), "--training.local-batch-size", local_batch),
        *("--checkpoint.enable", "--checkpoint.load-only"),
        *("--checkpoint.initial-load-path", checkpoint(stock_run)),
        "--checkpoint.no-initial-load-model-only",
    )
    assert resumed.returncode != 0, resumed.tail()
    assert refusal in resumed.output, resumed.tail()


def test_stock_loader_restarts_the_data_when_its_state_is_skipped(
    work: Path, stock_dataset: Path, stock_run: Run
) -> None:
    resumed = stock_launch(
        work,
        "stock-resume-skipping-data",
        2,
        stock_dataset,
        *("--training.steps", str(2 * CHECKPOINT_STEP), "--training.local-batch-size", "4"),
        *("--checkpoint.enable", "--checkpoint.load-only"),
        *("--checkpoint.initial-load-path", checkpoint(stock_run)),
        "--checkpoint.no-initial-load-model-only",
        *("--checkpoint.exclude-from-loading", "dataloader"),
    ).check()
    assert "Training starts at step 7" in resumed.output
    for rank in range(2):
        first = batches(stock_run, rank)
        assert len(first) == CHECKPOINT_STEP
        assert batches(resumed, rank) == first  # steps 7..12 repeat the data of steps 1..6


def test_lane_pipeline_refuses_a_stock_checkpoint(
    work: Path, domains: dict[str, list[Path]], stock_run: Run
) -> None:
    resumed = launch(
        work,
        work / "zephon-from-stock",
        2,
        [
            *zephon_data_args(domains, work),
            *("--training.local-batch-size", "4", "--checkpoint.enable", "--checkpoint.load-only"),
            *("--checkpoint.initial-load-path", checkpoint(stock_run)),
            "--checkpoint.no-initial-load-model-only",
        ],
    )
    assert resumed.returncode != 0, resumed.tail()
    assert "StateError" in resumed.output, resumed.tail()
    assert "saved by TorchTitan's stock data loader" in resumed.output, resumed.tail()
    assert "Training starts" not in resumed.output
