"""What the data-parallel tests run in each of their processes (spawned: importable by name)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import torch
from torch import nn


class PoisonedOnRank1(nn.Module):
    """A linear classifier whose output turns NaN at its `at`-th forward pass in the process of
    rank 1 only: a non-finite loss on one data-parallel worker."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.linear = nn.Linear(28 * 28, 10)
        self.at, self.calls = at, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        out = self.linear(x.flatten(1))
        if torch.distributed.get_rank() == 1 and self.calls == self.at:
            out = out * float("nan")
        return out


def nan_on_one_rank(rank: int, world: int, folder: str) -> None:
    """Train 3 epochs of 2 steps with the NaN on rank 1's second step (an epoch's last step, where
    the loop checks); write how this process ended to folder/rank-R.json."""
    from workers.data.images import ImageSet
    from workers.training.config import TrainConfig
    from workers.training.epochs import NonFiniteLossError
    from workers.training.trainer import train

    torch.distributed.init_process_group(
        "gloo",
        init_method=f"file://{folder}/rendezvous",  # no port another process could take first
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=20),  # a process left waiting fails after this, not after 30 min
    )
    generator = torch.Generator().manual_seed(0)
    data = ImageSet(
        torch.randint(0, 256, (64, 1, 28, 28), dtype=torch.uint8, generator=generator),
        torch.arange(64) % 10,
        tuple(str(c) for c in range(10)),
    )
    model = nn.parallel.DistributedDataParallel(PoisonedOnRank1(at=2))
    outcome: dict[str, object]
    try:
        train(model, data, TrainConfig(epochs=3, batch_size=32, lr=0.01, augment=False), shard=(rank, world))
        outcome = {"ended": "finished"}
    except NonFiniteLossError as e:
        outcome = {"ended": "NonFiniteLossError", "step": e.step}
    except Exception as e:  # noqa: BLE001 - the test reports whatever else stopped it (a collective's timeout)
        outcome = {"ended": type(e).__name__}
    Path(folder, f"rank-{rank}.json").write_text(json.dumps(outcome))
    torch.distributed.barrier()  # both ranks are past their last collective before either tears down
    torch.distributed.destroy_process_group()
