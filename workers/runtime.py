"""How this process computes: torch's thread count and bf16 autocast, set in one place for the
trainer, the teachers and inference alike."""

from __future__ import annotations

import contextlib

import torch


def use_threads(threads: int) -> None:
    """torch intra-op threads for this process: one per CPU the task holds (more than the cores
    held slows training down: docs/benchmarks.md)."""
    torch.set_num_threads(max(1, int(threads)))


def autocast(device: torch.device | str, precision: str) -> contextlib.AbstractContextManager:
    """bf16 autocast on `device` for `precision` "bf16"; nothing for "fp32"."""
    if precision == "bf16":
        return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
    if precision != "fp32":
        raise ValueError(f"precision must be fp32 or bf16, got {precision!r}")
    return contextlib.nullcontext()
