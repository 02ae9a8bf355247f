"""The order of a dataset's records in the plan: held-out records, calibration sample, epochs."""

from pipeline.order.base import DatasetOrder, OrderVersion
from pipeline.order.global_permutation import GlobalPermutationOrder
from pipeline.order.shard_window import ShardWindowOrder

__all__ = ["DatasetOrder", "GlobalPermutationOrder", "OrderVersion", "ShardWindowOrder"]
