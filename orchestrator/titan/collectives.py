"""What the data loader's ranks exchange: 32-byte lane digests, per-step counts and states.

Ranks never exchange data. Each step, every rank of the data-parallel group
sends ``1 + n * 36`` bytes (a "has a step" flag, then per owned lane a u32 lane
id and its 32-byte digest) in one ``all_gather`` of a uint8 tensor; the flag
makes all ranks stop together when one of them runs out of data. At the step's
end, one ``all_gather`` of ``[tokens, data wait, new shards]`` gives the global token
count, the slowest rank's wait and how many shards the ranks read for the first time (only
then do they gather those shards' content hashes, as objects). Checkpoints gather the ranks' (small, JSON) pipeline
states with ``all_gather_object``.
"""

from __future__ import annotations

import struct
from typing import Any

import torch
import torch.distributed as dist

_LANE_RECORD = struct.Struct("<I32s")


class DataParallelGroup:
    """The ``size`` data-parallel ranks a data loader exchanges with.

    ``group`` is their process group (None: the default group); with ``size == 1``
    nothing is exchanged and no process group is needed.
    """

    def __init__(
        self, group: dist.ProcessGroup | None, device: torch.device, size: int = 1
    ) -> None:
        if size > 1:
            assert dist.get_world_size(group) == size, (
                f"the exchange group has {dist.get_world_size(group)} ranks, expected {size}"
            )
        self.group = group
        self.device = device
        self.size = size

    def gather_lane_digests(
        self, digests: dict[int, bytes] | None, lanes_per_rank: int
    ) -> dict[int, bytes] | None:
        """Every rank's lane digests of the step, or None when some rank has no further step."""
        payload = bytearray(1 + lanes_per_rank * _LANE_RECORD.size)
        if digests is not None:
            assert len(digests) == lanes_per_rank, (
                f"a rank holds {lanes_per_rank} lanes, got digests of {len(digests)}"
            )
            payload[0] = 1
            for i, (lane, digest) in enumerate(sorted(digests.items())):
                _LANE_RECORD.pack_into(payload, 1 + i * _LANE_RECORD.size, lane, digest)
        gathered = self._all_gather(torch.frombuffer(payload, dtype=torch.uint8))
        merged: dict[int, bytes] = {}
        for rank_payload in gathered:
            data = rank_payload.cpu().numpy().tobytes()
            if data[0] != 1:
                return None
            for lane, digest in _LANE_RECORD.iter_unpack(data[1:]):
                merged[lane] = digest
        return merged

    def gather_counts(
        self, tokens: int, wait_s: float, new_shards: int = 0
    ) -> tuple[int, float, int]:
        """Sum of the ranks' tokens, the largest wait of any rank and the sum of the shards
        the ranks read for the first time (when > 0, every rank then gathers them)."""
        gathered = self._all_gather(torch.tensor([tokens, wait_s, new_shards], dtype=torch.float64))
        stacked = torch.stack([t.cpu() for t in gathered])
        return (
            int(stacked[:, 0].sum().item()),
            float(stacked[:, 1].max().item()),
            int(stacked[:, 2].sum().item()),
        )

    def gather_objects(self, obj: Any) -> list[Any]:
        """``obj`` of every rank, in rank order (pickled; for small states only)."""
        if self.size == 1:
            return [obj]
        gathered: list[Any] = [None] * self.size
        dist.all_gather_object(gathered, obj, group=self.group)
        return gathered

    def _all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        if self.size == 1:
            return [tensor]
        tensor = tensor.to(self.device)
        gathered = [torch.empty_like(tensor) for _ in range(self.size)]
        dist.all_gather(gathered, tensor, group=self.group)
        return gathered
