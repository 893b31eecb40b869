"""What bounds a run's memory: the cgroup limits it reads, the copies the in-memory path would hold,
the embedded Ray's object store under a limit, and the capped benchmark's report (issue 33)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fresh_python import fresh_python

GiB = 1 << 30
NO_LIMIT = "9223372036854771712"  # what cgroup v1 reports for an unlimited cgroup


def _cgroup(folder: Path, limit: str, usage: int, v2: bool = False) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ("memory.max" if v2 else "memory.limit_in_bytes")).write_text(f"{limit}\n")
    (folder / ("memory.current" if v2 else "memory.usage_in_bytes")).write_text(f"{usage}\n")


def test_the_cgroup_limits_of_every_ancestor_apply(tmp_path):
    from orchestrator.host import available_memory, memory_limit, own_cgroups

    mount = tmp_path / "sys"
    membership = tmp_path / "cgroup"
    membership.write_text("9:cpu:/\n4:memory:/bench/run\n0::/\n")
    _cgroup(mount / "memory", NO_LIMIT, 20 * GiB)
    _cgroup(mount / "memory" / "bench", str(2 * GiB), int(1.5 * GiB))  # the parent is the tighter
    _cgroup(mount / "memory" / "bench" / "run", str(3 * GiB), 1 * GiB)
    found = own_cgroups(membership, mount)
    assert [folder for folder, _, _ in found] == [
        mount / "memory" / "bench" / "run",
        mount / "memory" / "bench",
        mount / "memory",
    ]
    assert memory_limit(found) == 2 * GiB
    assert available_memory(found) == GiB // 2  # the parent's 2 − 1.5 GiB, not the child's 3 − 1

    v2 = tmp_path / "v2"
    (v2 / "cgroup.controllers").parent.mkdir()
    (v2 / "cgroup.controllers").write_text("memory\n")
    membership.write_text("0::/user.slice\n")
    _cgroup(v2, "max", 5 * GiB, v2=True)
    _cgroup(v2 / "user.slice", str(4 * GiB), 3 * GiB, v2=True)
    found = own_cgroups(membership, v2)
    assert memory_limit(found) == 4 * GiB
    assert available_memory(found) == GiB
    membership.write_text("4:memory:/\n")
    assert memory_limit(own_cgroups(membership, mount)) is None  # the root: no limit


def _spec(tmp_path: Path, method: dict, replica_cpus: float = 1.0):
    from pipelines.spec import parse_spec

    return parse_spec(
        {
            "model": "bounds",
            "version": "v1",
            "arch": "small-cnn",
            "storage": str(tmp_path / "runs"),
            "data": {"path": str(tmp_path / "photos"), "streaming": False, "image_size": 8},
            "method": method,
            "resources": {"replica": {"cpus": replica_cpus}},
        }
    )


def test_the_in_memory_path_is_held_by_the_driver_and_each_trainer_that_runs_at_once(tmp_path, monkeypatch):
    from orchestrator.planning.streaming import in_memory_holders

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert in_memory_holders(_spec(tmp_path, {"name": "elodi", "m": 4})) == 3  # 2 replicas at once on 2 cores
    assert in_memory_holders(_spec(tmp_path, {"name": "elodi", "m": 4}, replica_cpus=2)) == 2
    assert in_memory_holders(_spec(tmp_path, {"name": "none"})) == 2
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert in_memory_holders(_spec(tmp_path, {"name": "elodi", "m": 4})) == 5
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")  # the trainers run on the cluster's nodes
    assert in_memory_holders(_spec(tmp_path, {"name": "elodi", "m": 4})) == 1


def test_streaming_false_names_the_memory_its_holders_would_need(tmp_path, monkeypatch):
    from PIL import Image

    from orchestrator.planning import streaming
    from orchestrator.planning.plan import data_request
    from pipelines.spec import SpecError

    for label in ("a", "b"):
        (tmp_path / "photos" / label).mkdir(parents=True)
        for i in range(10):
            Image.new("RGB", (8, 8), (i * 20, 0, 0)).save(tmp_path / "photos" / label / f"{i}.png")
    request = data_request(_spec(tmp_path, {"name": "elodi", "m": 2}))
    copy = streaming.in_memory_bytes(request)
    assert copy == 20 * 3 * 8 * 8
    monkeypatch.setattr(streaming, "available_memory", lambda: int(copy * 2.5))
    assert streaming.settle_streaming(request, holders=2).streaming is False
    with pytest.raises(SpecError) as caught:
        streaming.settle_streaming(request, holders=3)
    (line,) = caught.value.problems
    assert "in each of the driver and 2 trainer(s) at once" in line and line.endswith("set streaming: true")


def test_the_embedded_object_store_is_a_share_of_the_cgroup_limit(monkeypatch):
    from orchestrator.execution import cluster

    monkeypatch.setattr("orchestrator.host.memory_limit", lambda: 10 * GiB)
    assert cluster.object_store_bytes() == 3 * GiB
    monkeypatch.setattr("orchestrator.host.memory_limit", lambda: None)
    assert cluster.object_store_bytes() is None  # Ray's own default, from the machine's memory


def _run(label: str, images: int, peak: float, limit: float | None) -> dict:
    version = {"stages": {"student": 900.0}, "registered_version": "1", "error_rate": 0.2, "nfr": None}
    return {
        "label": label,
        "images": images,
        "limit_bytes": None if limit is None else int(limit * GiB),
        "peak_bytes": int(peak * GiB),
        "peak_resident_bytes": int(peak * GiB * 0.8),
        "oom_kills": 0,
        "wall_seconds": 100.0,
        "versions": {"v1": version, "v2": {**version, "stages": {"replica-0": 500.0, "distillation": 400.0}}},
        "footprint": {"copy_bytes": images * 49152, "holders": 3, "total_bytes": images * 49152 * 3},
        "samples": [[1.0, int(peak * GiB), 0]],
        "in_memory_check": {"exit": 2, "line": "needs about 4.4 GiB"},
    }


def test_the_memory_cap_benchmark_reports_the_peaks_growth_against_its_target():
    from benchmarks.streaming.memory_cap import report

    results = {
        "date": "2026-11-27",
        "machine": "2 CPU cores",
        "scale": 4,
        "side": 128,
        "runs": [_run("tiny", 2000, 3.0, None), _run("base", 32000, 3.5, 4.0), _run("4x", 128000, 3.7, 4.0)],
    }
    text = report(results)
    assert "| base | 32,000 | 4.4 (3 × 1.46) | 4.00 | 3.50 | 2.80 | 0 | yes | 100 |" in text
    assert "peak against the base run's: +5.7 % (target within ±10 %: met)" in text
    assert "exit 2: `needs about 4.4 GiB`" in text
    results["runs"][2] = _run("4x", 128000, 4.0, 4.0)
    assert "+14.3 % (target within ±10 %: MISSED)" in report(results)


def test_the_image_reading_tasks_load_no_torch(tmp_path):
    """A reading process decodes without torch (about 300 MB of it per process), unless it resizes."""
    from PIL import Image

    from orchestrator.dataplane.image_tasks import decode_images

    for i, name in enumerate(("cat", "dog")):
        (tmp_path / name).mkdir()
        Image.new("RGB", (8, 8), (i * 100, 0, 0)).save(tmp_path / name / "a.png")
    rows = {"file": [str(tmp_path / "dog" / "a.png"), str(tmp_path / "cat" / "a.png")]}
    decoded = decode_images(rows, str(tmp_path), ("cat", "dog"), 3, 8, True)
    assert list(decoded["key"]) == ["dog/a.png", "cat/a.png"] and decoded["label"].tolist() == [1, 0]
    assert decoded["image"].shape == (2, 3, 8, 8) and decoded["image"][0, 0, 0, 0] == 100
    probe = "import sys, orchestrator.dataplane.image_tasks; print('torch' in sys.modules)"
    done = fresh_python(probe)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr[-2000:]


def test_ray_workers_start_with_allocators_that_give_memory_back(monkeypatch):
    import ray

    from orchestrator.execution import cluster

    calls: list[dict] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR", raising=False)
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")  # the environment's own value wins
    cluster.connect("127.0.0.1:1")
    env = calls[0]["runtime_env"]["env_vars"]
    assert env["MALLOC_ARENA_MAX"] == "4" and env["ARROW_DEFAULT_MEMORY_POOL"] == "system"


def test_inference_batches_of_large_images_hold_at_most_8_mib_of_float_input():
    from workers.models.predict import INFERENCE_BATCH_BYTES, inference_batch_size

    assert INFERENCE_BATCH_BYTES == 8 << 20
    assert inference_batch_size(1024, (3, 224, 224)) == 13  # 8,388,608 // (4 · 150,528)
    assert inference_batch_size(1024, (3, 128, 128)) == 42  # // 196,608
    assert inference_batch_size(1024, (1, 28, 28)) == 1024  # 3.2 MB: unchanged
    assert inference_batch_size(1024, None) == 1024  # token ids
    assert inference_batch_size(1024, (3, 4096, 4096)) == 1


def test_predict_logits_feeds_a_model_of_large_images_bounded_batches_and_keeps_the_order():
    import torch
    from torch import nn

    from workers.data.encoded import EncodedSplit
    from workers.models.predict import predict_logits

    class Recording(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.sizes: list[int] = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.sizes.append(len(x))
            return x.float().mean(dim=(2, 3))  # each sample's channel means: its own logits

    values = torch.randint(0, 256, (400, 3, 128, 128), dtype=torch.uint8)
    model = Recording()
    logits = predict_logits(model, EncodedSplit(values), batch_size=1024)
    assert model.sizes == [42] * 9 + [22]
    expected = (values.float() / 127.5 - 1).mean(dim=(2, 3))  # the fixed map to [−1, 1]
    assert torch.allclose(logits, expected, atol=1e-5)


PREDICT_PROBE = """
import re, torch
from torch import nn
from workers.data.encoded import EncodedSplit
from workers.models.predict import predict_logits

class Bloated(nn.Module):  # each batch allocates 30 MB of scratch, as a model's input and activations do
    def forward(self, x):
        scratch = torch.ones(30 << 20, dtype=torch.uint8)
        return x.float().mean(dim=(2, 3)) + scratch[:1].float()

def anon_mb():
    return int(re.search(r"RssAnon:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) // 1024

values = torch.zeros(40 * 16, 3, 8, 8, dtype=torch.uint8)
before = anon_mb()
logits = predict_logits(Bloated(), EncodedSplit(values), batch_size=16)
print(anon_mb() - before, tuple(logits.shape))
"""


def test_predict_logits_keeps_no_batch_input_resident():
    """Over 40 batches, each with 30 MB of transient scratch, inference keeps at most a few batches'
    worth resident (a list of per-batch outputs pinned glibc's heap: about 1.2 GB here)."""
    done = fresh_python(PREDICT_PROBE)
    assert done.returncode == 0, done.stderr[-2000:]
    grown, shape = done.stdout.split(maxsplit=1)
    assert shape.strip() == "(640, 3)"
    assert int(grown) < 200, f"{grown} MB resident after inference"


TRIM_PROBE = """
import ctypes, re
from workers.runtime import release_free_memory

def anon_mb():
    return int(re.search(r"RssAnon:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) // 1024

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.mallopt(-3, 64 << 20)  # M_MMAP_THRESHOLD: these blocks come from the heap, as batches' often do
blocks, kept = [], []
for _ in range(30):  # batch-sized blocks, touched, each with a small object kept after it
    blocks.append(libc.malloc(30 << 20))
    ctypes.memset(blocks[-1], 1, 30 << 20)
    kept.append(libc.malloc(4096))
for block in blocks:  # freed: holes between the kept objects, which glibc keeps
    libc.free(ctypes.c_void_p(block))
before = anon_mb()
release_free_memory()
print(before, anon_mb())
"""


def test_freed_batches_go_back_to_the_system_after_a_phase():
    done = fresh_python(TRIM_PROBE)
    assert done.returncode == 0, done.stderr[-2000:]
    before, after = map(int, done.stdout.split())
    assert before - after > 800, (before, after)  # the 30 freed blocks' ~0.9 GB


def _colour_tree(root: Path, classes: int = 4, per_class: int = 25) -> Path:
    """Class c's images are one flat grey of value 40·(c+1): the sample's pixels name its classes."""
    import numpy as np
    from PIL import Image

    for c in range(classes):
        (root / f"class_{c}").mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(np.full((8, 8), 40 * (c + 1), dtype=np.uint8)).save(root / f"class_{c}" / f"{i}.png")
    return root


def test_the_statistics_sample_of_a_streamed_tree_spans_every_class_and_is_decoded_without_ray(tmp_path):
    import ray
    import torch

    from orchestrator.dataplane.image_streams import open_image_stream
    from orchestrator.planning.model_inputs import STATISTICS_SAMPLE

    train = open_image_stream(str(_colour_tree(tmp_path / "tree")), image_size=8).train
    was_running = ray.is_initialized()
    batches = list(train.statistics_images(8, batch=3))
    assert [len(b) for b in batches] == [3, 3, 2] and batches[0].shape[1:] == (1, 8, 8)
    values = sorted({int(v) for b in batches for v in b.reshape(-1)})
    assert values == [40, 80, 120, 160]  # the first 8 files would be class 0's alone
    everything = torch.cat(list(train.statistics_images(STATISTICS_SAMPLE)))
    assert len(everything) == len(train) and ray.is_initialized() == was_running


def test_preflight_of_a_streamed_tree_with_image_size_starts_no_ray(tmp_path):
    """Preflight takes the channel statistics itself: a Ray Data read there started a Ray of Ray's
    defaults (a dashboard, an object store sized by the machine, none of the run's worker
    environment) that the run then used."""
    import os
    import subprocess
    import sys

    import yaml

    tree = _colour_tree(tmp_path / "tree")
    spec = {"model": "m", "version": "v1", "arch": "mlp-small", "storage": str(tmp_path / "runs")}
    spec["data"] = {"path": str(tree), "image_size": 8, "streaming": True}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    probe = (
        "import ray\nfrom pipelines.spec import load_spec\nfrom orchestrator.planning.preflight import preflight\n"
        "plan = preflight(load_spec('spec.yaml'))\nprint(plan.spec.data.streaming, plan.start.inputs.mean is not None, "
        "'ray started' if ray.is_initialized() else 'ray not started')"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={
            **env,
            "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
            "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/m.db",
        },
    )
    assert done.stdout.strip() == "True True ray not started", done.stderr[-2000:]


def test_the_capped_benchmarks_json_keeps_its_values_and_a_sample_per_line():
    import json

    from benchmarks.streaming.memory_cap import results_json

    results = {"runs": [{"label": "base", "peak_bytes": 5, "samples": [[0.5, 10, 9], [1.25, 12, 11], [2.0, 3e9, 7]]}]}
    text = results_json(results)
    assert json.loads(text) == results
    assert (
        "[0.5, 10, 9]" in text
        and "[1.25, 12, 11]" in text
        and "[2.0, 3000000000.0, 7]" in text
        and len(text.splitlines()) == 13
    )


TABLE_PROBE = """
import sys
import pyarrow as pa, pyarrow.parquet as pq
from orchestrator.dataplane.table_tasks import Shards, TableReading, shard_rows
from workers.data.tokenizer import text_input

texts = [f"the {w} stopped at light {i}" for i, w in enumerate(["car", "bus", "bike"] * 20)]
pq.write_table(pa.table({"text": texts, "label": [i % 2 for i in range(60)]}), sys.argv[1])
reading = TableReading(Shards((sys.argv[1],), ".parquet", "text", "label"), 0, (0.1, 0.2), ("0", "1"), False)
rows = list(shard_rows({"file": [sys.argv[1]]}, reading, text_input(texts, vocab_size=40, max_length=8)))
kept = sum(len(r["id"]) for r in rows)
print(kept, rows[0]["values"].shape[1], rows[0]["values"].dtype, "torch" in sys.modules)
"""


def test_the_text_reading_tasks_load_no_torch(tmp_path):
    """A streamed table's reading task splits, tokenizes and labels its rows without torch."""
    done = fresh_python(TABLE_PROBE, str(tmp_path / "shard.parquet"))
    assert done.returncode == 0, done.stderr[-2000:]
    kept, width, dtype, torch_loaded = done.stdout.split()
    assert 30 < int(kept) < 60 and width == "8" and dtype == "int32"  # the train split's share of 60 rows
    assert torch_loaded == "False"
