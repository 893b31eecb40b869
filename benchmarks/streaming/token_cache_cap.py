"""A streamed text split's kept first epoch stays out of its process's memory (issue 33): a
`TokenCache` several times larger than a memory cgroup's limit is written and read back inside it.

    sudo python -m benchmarks.streaming.token_cache_cap [--rows 8000000] [--limit-mib 512]

Needs root and the cgroup v1 memory controller. A child process, alone in a memory cgroup with the
limit, keeps `rows` rows in a TokenCache as a streamed text split's first epoch does — batches of
1,024 as the reading tasks hand them: ids, token ids (8 to 120 of them, right-padded to 128), lengths,
labels and a text of about 60 characters — then reads two later epochs whole, in their seeded
orders. The kept file is in the temporary folder ($TMPDIR), on the disk here. Reported: the file's
size; what the in-memory path would hold for the same rows (token ids N × 128 int32 plus the texts as
Python strings); the cgroup's peak (`memory.max_usage_in_bytes`, which counts the page cache the
file's pages take); the sampled peak of resident memory (rss + shmem, which does not); OOM kills; and
rows/s written and read. Results: docs/results/token-cache-cap-results.json and a section of
docs/benchmarks/streaming.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.cgroups import CGROUPS, Cgroup
from benchmarks.report import RESULTS_DIR, ROOT, markdown_table, page, write_section

HEADING = "## Text kept after the first epoch, in a memory cgroup smaller than it"
RESULTS = RESULTS_DIR / "token-cache-cap-results.json"
MAX_LENGTH = 128
BATCH = 1024
MiB = float(1 << 20)


def rows_batch(start: int, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """n rows as the reading tasks make them (table_tasks.text_rows)."""
    lengths = rng.integers(8, 121, n).astype(np.int64)
    values = rng.integers(1, 30_000, (n, MAX_LENGTH), dtype=np.int32)
    values[np.arange(MAX_LENGTH)[None, :] >= lengths[:, None]] = 0
    texts = [f"row {start + i}: " + "a tweet about a car and the weather " for i in range(n)]
    ids = np.arange(start, start + n, dtype=np.int64)
    return {"id": ids, "values": values, "length": lengths, "label": ids % 3, "text": np.array(texts, dtype=object)}


def child(rows: int) -> dict[str, Any]:
    """Inside the cgroup: keep `rows` rows, then read two later epochs whole."""
    from orchestrator.dataplane.token_cache import TokenCache

    rng = np.random.default_rng(0)
    cache = TokenCache((0, "synthetic", BATCH))
    started, tokens, text_bytes = time.perf_counter(), 0, 0
    for start in range(0, rows, BATCH):
        batch = rows_batch(start, min(BATCH, rows - start), rng)
        tokens += int(batch["length"].sum())
        text_bytes += sum(len(t) for t in batch["text"])
        cache.add(batch)
    assert cache.finish(), "the file was dropped"
    written = time.perf_counter() - started
    assert cache.file is not None
    size = os.fstat(cache.file.fileno()).st_size
    reads = []
    for epoch in (1, 2):
        started, seen, checksum = time.perf_counter(), 0, 0
        for batch in cache.batches(64, epoch):
            seen += len(batch["id"])
            checksum += int(batch["id"].sum())
        assert seen == rows and checksum == rows * (rows - 1) // 2, "every row once"
        reads.append(rows / (time.perf_counter() - started))
    return {
        "file_bytes": size,
        "tokens": tokens,
        "text_bytes": text_bytes,
        "written_rows_per_second": rows / written,
        "read_rows_per_second": reads,
    }


def in_memory_bytes(rows: int, text_bytes: int) -> int:
    """What the in-memory path holds for these rows: token ids N × MAX_LENGTH int32, and each text
    as a Python str (49 bytes of header for ASCII, plus its characters) with its list slot."""
    return rows * MAX_LENGTH * 4 + rows * (49 + 8) + text_bytes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8_000_000)
    parser.add_argument("--limit-mib", type=int, default=512)
    parser.add_argument("--out", type=Path, default=page("streaming"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--report", action="store_true", help=f"only rewrite the section from {RESULTS}")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.rows)))
        return 0
    if args.report:
        write_section(args.out, HEADING, report(json.loads(RESULTS.read_text())))
        return 0
    if os.geteuid() != 0 or not (CGROUPS / "memory.limit_in_bytes").exists():
        print("needs root and the cgroup v1 memory controller", file=sys.stderr)
        return 2
    limit = args.limit_mib << 20
    group = Cgroup("congruent-token-cache", limit)
    try:
        started = time.perf_counter()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        argv = [sys.executable, "-m", "benchmarks.streaming.token_cache_cap", "--child", "--rows", str(args.rows)]
        done = group.run(argv, ROOT, env)
        wall = time.perf_counter() - started
        figures = group.figures()
    finally:
        group.remove()
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-4000:], file=sys.stderr)
    measured = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
    results = {
        "date": time.strftime("%Y-%m-%d"),
        "rows": args.rows,
        "limit_bytes": limit,
        "returncode": done.returncode,
        "wall_seconds": wall,
        **{k: v for k, v in figures.items() if k != "samples"},
        **measured,
    }
    if measured:
        results["in_memory_bytes"] = in_memory_bytes(args.rows, measured["text_bytes"])
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    write_section(args.out, HEADING, report(results))
    print(report(results))
    return 0 if done.returncode == 0 else 1


def report(results: dict[str, Any]) -> str:
    """The docs section of a results file."""
    if results["returncode"] != 0:
        return (
            f"`python -m benchmarks.streaming.token_cache_cap --rows {results['rows']} --limit-mib "
            f"{results['limit_bytes'] >> 20}` ({results['date']}): the child process failed "
            f"(exit {results['returncode']}, OOM kills {results['oom_kills']})."
        )
    reads = results["read_rows_per_second"]
    table = markdown_table(
        [
            "rows",
            "kept file, MiB",
            "in-memory path would hold, MiB",
            "limit, MiB",
            "peak (max_usage_in_bytes), MiB",
            "peak resident (rss + shmem), MiB",
            "OOM kills",
            "written, rows/s",
            "later epochs read, rows/s",
        ],
        [
            [
                f"{results['rows']:,}",
                f"{results['file_bytes'] / MiB:,.0f}",
                f"{results['in_memory_bytes'] / MiB:,.0f}",
                f"{results['limit_bytes'] / MiB:,.0f}",
                f"{results['peak_bytes'] / MiB:,.0f}",
                f"{results['peak_resident_bytes'] / MiB:,.0f}",
                str(results["oom_kills"]),
                f"{results['written_rows_per_second']:,.0f}",
                " / ".join(f"{r:,.0f}" for r in reads),
            ]
        ],
    )
    ratio = results["file_bytes"] / results["limit_bytes"]
    return f"""`python -m benchmarks.streaming.token_cache_cap --rows {results["rows"]} --limit-mib \
{results["limit_bytes"] >> 20}` ({results["date"]}, one run; raw figures in `{RESULTS}`). One process \
in a memory cgroup keeps a streamed text split's first epoch (`TokenCache`: synthetic rows of 8–120 \
token ids and a short text, added in batches of 1,024 as the reading tasks hand them) and reads two \
later epochs whole in their seeded orders, batches of 64. The kept file is {ratio:.1f}× the limit; \
its pages are page cache the kernel writes out and drops, counted in the cgroup's usage but not in \
its resident memory. The cgroup's usage reached its limit {results["limit_hits"]:,} times; each time \
the kernel reclaimed the file's pages, and the process ran to the end with {results["oom_kills"]} OOM \
kills. The file is in $TMPDIR: on a tmpfs it would be memory, so point $TMPDIR at a disk.

{table}
"""


if __name__ == "__main__":
    raise SystemExit(main())
