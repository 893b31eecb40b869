"""The docs section of `benchmarks.streaming.teachers`: each teacher path's samples/s against today's
pool, and the choice between them computed from the figures."""

from __future__ import annotations

from benchmarks.report import RESULTS_DIR, markdown_table

HEADING = "## Teachers on a stream (CPU, data that fits)"
RESULTS = RESULTS_DIR / "stream-teachers-results.json"
K = 5
ACTORS = 2
ACTOR_CPUS = 0.5
PLAIN = ("no teachers (plain), in memory", "no teachers (plain), streamed")
IN_TASK = "in the student's task, streamed"


def report(results: dict) -> str:
    """The docs section of a results file: each path's samples/s and its ratio to today's pool."""
    table = []
    for data in dict.fromkeys(r["data"] for r in results["rows"]):
        rows = [r for r in results["rows"] if r["data"] == data]
        plain = {r["path"]: r["samples_per_second"] for r in rows if r["path"] in PLAIN}
        today = next(r["samples_per_second"] for r in rows if r["path"] == "pool, split in memory")
        for r in rows:
            if r["path"] in PLAIN:
                continue
            sent = f"{r['bytes_per_request']:,}" if "bytes_per_request" in r else "–"
            table.append(
                [
                    data,
                    r["path"],
                    f"{r['samples_per_second']:,.0f}",
                    f"**{r['samples_per_second'] / today:.2f}×**",
                    f"{r['first_epoch_samples_per_second']:,.0f}",
                    sent,
                ]
            )
        cost = plain[PLAIN[1]] / plain[PLAIN[0]]
        table.append([data, "*plain training, no teachers: streamed / in memory*", "", f"*{cost:.2f}×*", "", ""])
    headers = ["data", "teachers", "samples/s", "/ today's pool", "first epoch, samples/s", "bytes a request"]
    check = results["agreement"]
    worst = max(v for k, v in check.items() if k.endswith("max |Δ value|"))
    equal = min(v for k, v in check.items() if k.endswith("classes equal"))
    return f"""Command: `python -m benchmarks.streaming.teachers --epochs {results["epochs"]}`, {results["date"]}, \
{results["machine"]}, torch {results["torch"]}, Ray {results["ray"]}, one run; raw figures in `{RESULTS}`. \
An ELODI student (small-cnn on {results["images"]:,} Fashion-MNIST PNGs with shifts and flips; text-linear \
on the tweets' 8 parquet shards) with 2 frozen teachers sent as top-{K}; every pool or stage has \
{ACTORS} actors of {ACTOR_CPUS} CPU; the student's process uses one torch thread. Samples/s are over \
epochs 2–{results["epochs"]}; "today's pool" is the first row of each data set (the actors hold the \
split in memory, requests by index and draws). The last row of each set is what the stream costs \
without any teachers: a plain training of the same student, streamed against in memory, in the same run.

{markdown_table(headers, table)}

One augmented batch through each image path, against today's pool: top-{K} values within \
{worst:.1e}, {100 * equal:.0f} % of the classes equal.

**What was chosen, and why.** {choice(results)} So the streamed batch's trip through the object \
store costs no more than the stream itself: one pool serves both kinds of split, asked by index \
and draws when it holds the split (884 bytes a request for 128 images) and by the streamed batch \
on a stream. {within(results)} The actors, the client, its cache, the reservation with the \
student and the resending of a dead actor's batches are one. The Ray Data actor stage is not \
kept: it was the slowest image path, its actors start again with each epoch's dataset (Ray Data \
runs one execution per epoch), \
every row crosses the object store twice (decoded, then with its logits), and its actors are \
reserved apart from the student's task, outside the one placement group that starts both or \
neither. On a stream, `teacher_actors` left out stays 0: teachers in the student's task need no \
CPUs of their own, and here, on one machine, they ran against the streamed pool at {local(results)}; \
the pool is for teachers on other nodes or GPUs than the student's, or where its speed is worth the \
actors' CPUs.
"""


def choice(results: dict) -> str:
    """The sentence of the section's choice: each data set's pool ratio against its stream's cost."""
    parts = []
    for data in dict.fromkeys(r["data"] for r in results["rows"]):
        rate = {r["path"]: r["samples_per_second"] for r in results["rows"] if r["data"] == data}
        pooled = rate["pool, streamed batch"] / rate["pool, split in memory"]
        plain = rate[PLAIN[1]] / rate[PLAIN[0]]
        stage = ""
        if "Ray Data actor stage" in rate:
            stage = f", the Ray Data stage {rate['Ray Data actor stage'] / rate['pool, split in memory']:.2f}×"
        parts.append(
            f"{data}: the streamed pool runs at {pooled:.2f}× today's pool{stage}, and a plain training "
            f"streamed at {plain:.2f}× its in-memory self"
        )
    return "; ".join(parts) + "."


def _rates(results: dict) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for row in results["rows"]:
        out.setdefault(row["data"], {})[row["path"]] = row["samples_per_second"]
    return out


def within(results: dict) -> str:
    """Where the streamed pool is within 10 % of today's pool, and what that leaves of the two forms."""
    close = [d for d, r in _rates(results).items() if r["pool, streamed batch"] >= 0.9 * r["pool, split in memory"]]
    if len(close) == len(_rates(results)):
        return "The two forms are within 10 % of each other on every data set."
    if not close:
        return "The two forms are not within 10 % of each other, because the stream is not; both stay."
    return (
        f"The two forms are within 10 % of each other on {', '.join(close)} only, where the stream is too; "
        "both stay, the index form for a split held in memory."
    )


def local(results: dict) -> str:
    """The in-process teachers' speed as a ratio of the streamed pool's, per data set."""
    return " and ".join(
        f"{r[IN_TASK] / r['pool, streamed batch']:.2f}× on {data}" for data, r in _rates(results).items()
    )
