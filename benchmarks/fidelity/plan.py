"""What the fidelity benchmark trains: the modes, and one job per model, shared across methods.

Versions (data growth on one architecture, so BCWI applies): v1 is trained on the first
`train_sizes[0]` training images, `old` (v2) on the first `train_sizes[1]`, `new` (v3) on the first
`train_sizes[2]`; each slice contains the one before it. Per seed s and version v:

- replicas `s{s}/{v}/replica-i`, i = 1 … max(m, curve): plain models, seeds 10000·s + 1000·v + i.
  Replica 1 is the version's plain (no-treatment) model; replicas 1 … m form the paragon and
  ELODI's teacher ensemble.
- students `s{s}/{v}/<method>`, seed 10000·s + 1000·v + 500: kd, fd-kl, fd-lm, dynamic-fd toward
  the plain old model; `elodi-k{K}-m{m}` toward replicas 1 … m of their own version (ELODI's
  Algorithm 1: old and new both distilled); `elodi-legacy-…` adds Eq. 9's LDI toward the plain old.
- `bcwi-finetune`: plain CE starting from the plain old model's weights; `bcwi`: the interpolation
  θ = α·θ_old + (1−α)·θ_new with α picked on the validation split.

A job's output path holds a digest of everything that determines it (data, architecture, train
config, objective, references' paths, start weights), so a rerun reuses finished models and a
changed setting trains a new one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Literal

from workers.data.text import TextSet
from workers.inputs import InputSpec
from workers.jobs import DataRequest, TrainJob, cached_splits
from workers.losses import LdiReduction, TopKBy
from workers.objectives import Objective
from workers.trainer import TrainConfig

VERSIONS = ("v1", "old", "new")
STUDENT_OFFSET = 500


@dataclass(frozen=True)
class Mode:
    """Scale of one benchmark run (defaults in one place)."""

    name: str
    seeds: int
    arch: str
    train_sizes: tuple[int | None, int | None, int | None]  # v1, old, new (None: all)
    eval_limit: int | None
    epochs: int
    lr: float
    m: int  # ensemble size of the paragon and ELODI rows
    curve: tuple[int, ...]  # ensemble sizes of the NFR-vs-m table
    curve_seeds: int | None  # seeds of the NFR-vs-m table (None: all); it costs ~2/3 of a seed's table
    k_small: int  # ELODI's small K (K = C is "all classes")
    alpha: float = 0.8  # ELODI's weight of LDI
    legacy_weight: float = 0.5  # λ of Eq. 9
    bcwi_tolerance: float = 0.003  # BCWI: ER(α) ≤ ER(α = 0) + this, on val
    elodi_epochs: int | None = None  # ELODI students' epochs (None: `epochs`, like every other model)
    elodi_clip: float | None = 5.0  # ELODI students' gradient-norm clip (TrainConfig.max_grad_norm)
    fd_alpha: float | None = None  # KD / FD weight α (None: the method's default, 0.5 / 0.9)
    topk_by: TopKBy = "teacher"  # LDI's K(x): the teacher ensemble's top-K (ELODI Eq. 5), the student's, or union
    device: str = "cpu"
    gpus_per_task: float = 0.0
    batch_size: int = 128
    precision: Literal["fp32", "bf16"] = "fp32"  # bf16: forward passes under autocast (students and their teachers)
    pack: int = 1  # replicas of one version trained together as one batched model (local executor)
    chain: bool = True  # the v1 → v2 → v3 chain table (needs ELODI students of v1 too)
    curve_first: bool = False  # plan the NFR-vs-m models (paragons, ELODI both ends) before the main table
    ldi_reduction: LdiReduction = "sum"
    exclude_label: bool = False
    dataset: str = "fashion-mnist"  # DataRequest.source of every version
    old_arch: str | None = None  # v1's and old's architecture (None: `arch`); BCWI fine-tunes it
    old_lr: float | None = None  # their learning rate (None: `lr`)
    old_epochs: int | None = None  # their epochs (None: `epochs`)
    toward_old: tuple[str, ...] = ("kd", "fd-kl", "fd-lm", "dynamic-fd")  # methods distilling the plain old
    weight_decay: float = 5e-4  # text: 0 (a text-bag's mean of embeddings underfits with it)

    @property
    def text(self) -> bool:
        return self.dataset == "tweet-sentiment"


# old = text-bag on half of the tweets' training split, new = a text-cnn on all of it, each version with
# its own tokenizer; BCWI text-bag → text-bag. The methods: no dynamic FD
TEXT = Mode(
    "text",
    seeds=3,
    arch="text-cnn",
    train_sizes=(13640, 13640, None),
    eval_limit=None,
    epochs=3,
    lr=0.02,
    m=4,
    curve=(2, 4),
    curve_seeds=1,
    k_small=3,
    batch_size=64,
    chain=False,
    elodi_epochs=6,
    dataset="tweet-sentiment",
    old_arch="text-bag",
    old_lr=2.0,
    old_epochs=5,
    weight_decay=0.0,
    toward_old=("kd", "fd-kl", "fd-lm"),
)

MODES = {
    "quick": Mode(
        "quick",
        seeds=1,
        arch="small-cnn",
        train_sizes=(500, 1000, 2000),
        eval_limit=1000,
        epochs=1,
        lr=0.05,
        m=2,
        curve=(1, 2),
        curve_seeds=None,
        k_small=3,
    ),
    "default": Mode(
        "default",
        seeds=3,
        arch="small-cnn",
        train_sizes=(2500, 5000, 10000),
        eval_limit=None,
        epochs=6,
        lr=0.05,
        m=4,
        curve=(1, 2, 4, 8),
        curve_seeds=1,
        k_small=3,
    ),
    # one GPU, no Ray (python -m benchmarks.fidelity --gpu): resnet20 on the full training split for old
    # and new (the update retrains; seeds differ), m = 4 and 8, both ends and plain old → ELODI new,
    # every method, 3 seeds; replicas packed 8 at a time, students with their teachers in-process, bf16
    "gpu": Mode(
        "gpu",
        seeds=3,
        arch="resnet20",
        train_sizes=(27000, None, None),
        eval_limit=None,
        epochs=4,
        lr=0.1,
        m=8,
        curve=(4, 8),
        curve_seeds=None,
        k_small=10,
        device="cuda",
        batch_size=256,
        precision="bf16",
        pack=8,
        chain=False,
        elodi_epochs=8,
        curve_first=True,
    ),
    # text (python -m benchmarks.fidelity --text, ~30 min on 2 CPU cores): see TEXT
    "text": TEXT,
    # the same with a text-transformer as the new model, on one GPU in this process (issue 24); on
    # 2 CPU cores a transformer training takes ~6 min, too long for a 3-seed table there
    "gpu-text": replace(
        TEXT,
        name="gpu-text",
        arch="text-transformer",
        epochs=5,
        lr=0.05,
        m=8,
        curve=(4, 8),
        curve_seeds=None,
        batch_size=128,
        elodi_epochs=None,
        device="cuda",
    ),
    # the text modes' code path on a CPU in a minute (tests/test_fidelity.py)
    "text-check": replace(
        TEXT,
        name="text-check",
        seeds=1,
        train_sizes=(600, 600, 1200),
        eval_limit=500,
        epochs=1,
        m=2,
        curve=(1, 2),
        curve_seeds=None,
        elodi_epochs=None,
        old_epochs=1,
    ),
    # the gpu mode's code path on a CPU in a minute (tests/test_fidelity.py)
    "gpu-check": Mode(
        "gpu-check",
        seeds=1,
        arch="mlp-small",
        train_sizes=(500, 1000, 1000),
        eval_limit=500,
        epochs=1,
        lr=0.05,
        m=2,
        curve=(1, 2),
        curve_seeds=None,
        k_small=10,
        batch_size=128,
        pack=2,
        chain=False,
    ),
}


@dataclass(frozen=True)
class Planned:
    """One unit of work: `train` a TrainJob, or pick and apply BCWI's α (`bcwi`).

    `references` maps a reference name ("old", "teacher") to the planned names whose checkpoints
    serve it (several: the mean of their logits). Outputs: `<stem>.pt`, `.eval.npy`, `.val.npy`
    (logits), `.json` (the record)."""

    name: str
    kind: str
    stem: str
    job: TrainJob
    references: tuple[tuple[str, tuple[str, ...]], ...] = ()
    init_from: str | None = None  # planned name whose weights the job starts from
    group: str = "table"

    @property
    def needs(self) -> tuple[str, ...]:
        names = [n for _, group in self.references for n in group]
        return tuple(dict.fromkeys(names + ([self.init_from] if self.init_from else [])))


def digest(*parts: object) -> str:
    """First 10 hex digits of sha256(repr(parts))."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:10]


@dataclass
class Planner:
    """Adds jobs in submission order (first added, first run), each name once."""

    mode: Mode
    folder: Path
    jobs: dict[str, Planned] = field(default_factory=dict)
    group: str = "table"

    def data(self, version: str) -> DataRequest:
        """The version's data: its first `train_sizes` training samples; eval and val are the same for all."""
        size = self.mode.train_sizes[VERSIONS.index(version)]
        return DataRequest(self.mode.dataset, train_limit=size, eval_limit=self.mode.eval_limit)

    def arch(self, version: str) -> str:
        return self.mode.arch if version == "new" else self.mode.old_arch or self.mode.arch

    def inputs(self, version: str) -> InputSpec | None:
        """Text: the version's tokenizer, trained on its training split (the spec's defaults); images: None."""
        return _tokenizer_of(self.data(version)) if self.mode.text else None

    def config(
        self, seed: int, epochs: int | None = None, clip: float | None = 5.0, version: str = "new"
    ) -> TrainConfig:
        old = version != "new"
        return TrainConfig(
            epochs=epochs or (self.mode.old_epochs if old and self.mode.old_epochs else self.mode.epochs),
            lr=self.mode.old_lr if old and self.mode.old_lr else self.mode.lr,
            seed=seed,
            device=self.mode.device,
            max_grad_norm=clip,
            batch_size=self.mode.batch_size,
            precision=self.mode.precision,
            weight_decay=self.mode.weight_decay,
        )

    def add(
        self,
        name: str,
        version: str,
        seed: int,
        objective: Objective = Objective(),
        references: dict[str, tuple[str, ...]] | None = None,
        init_from: str | None = None,
        kind: str = "train",
        epochs: int | None = None,
        clip: float | None = 5.0,
        like: str | None = None,
    ) -> str:
        """Add job `name`, trained on `version`'s data; architecture, tokenizer and settings are
        those of version `like` (default: `version`; BCWI fine-tunes the old architecture on new data)."""
        if name in self.jobs:
            return name
        like = like or version
        refs = tuple(sorted((references or {}).items()))
        upstream = [self.jobs[n].stem for _, group in refs for n in group] + (
            [self.jobs[init_from].stem] if init_from else []
        )
        config = self.config(seed, epochs, clip, like)
        job = TrainJob(name, self.data(version), self.arch(like), config, "", objective, inputs=self.inputs(like))
        stem = str(self.folder / f"{name.replace('/', '_')}-{digest(kind, job, upstream)}")
        init_path = f"{self.jobs[init_from].stem}.pt" if init_from else None
        job = replace(job, checkpoint_uri=f"{stem}.pt", init_from=init_path)
        self.jobs[name] = Planned(name, kind, stem, job, refs, init_from, self.group)
        return name


@lru_cache(maxsize=4)
def _tokenizer_of(data: DataRequest) -> InputSpec:
    from workers.tokenizer import text_input  # Hugging Face tokenizers: text modes only

    train = cached_splits(data).train
    assert isinstance(train, TextSet)
    return text_input(train.texts)


def seed_of(seed: int, version: str, index: int) -> int:
    """Training seed of replica `index` (or a student, index = STUDENT_OFFSET) of `version`."""
    return 10000 * seed + 1000 * VERSIONS.index(version) + index


def replicas(plan: Planner, seed: int, version: str, count: int) -> tuple[str, ...]:
    """Names of replicas 1 … count of `version`, added if missing."""
    return tuple(
        plan.add(f"s{seed}/{version}/replica-{i}", version, seed_of(seed, version, i)) for i in range(1, count + 1)
    )


def plain(plan: Planner, seed: int, version: str) -> str:
    """The version's plain (no-treatment) model: its replica 1."""
    return replicas(plan, seed, version, 1)[0]


def elodi(plan: Planner, seed: int, version: str, m: int, k: int, legacy: bool = False) -> str:
    """ELODI student of `version` distilled from its replicas 1 … m (K classes per sample); with
    `legacy`, Eq. 9's extra LDI toward the plain old model (weight 1 − λ)."""
    teachers = replicas(plan, seed, version, m)
    objective = Objective(
        "elodi",
        alpha=plan.mode.alpha,
        k=k,
        topk_by=plan.mode.topk_by,
        legacy_weight=plan.mode.legacy_weight if legacy else None,
        ldi_reduction=plan.mode.ldi_reduction,
        exclude_label=plan.mode.exclude_label,
    )
    references = {"teacher": teachers}
    name = f"s{seed}/{version}/elodi-k{k}-m{m}"
    if legacy:
        references["old"] = (plain(plan, seed, "old"),)
        name = f"s{seed}/{version}/elodi-legacy-k{k}-m{m}"
    return plan.add(
        name,
        version,
        seed_of(seed, version, STUDENT_OFFSET),
        objective,
        references,
        epochs=plan.mode.elodi_epochs,
        clip=plan.mode.elodi_clip,
    )


def toward_old(plan: Planner, seed: int, method: str) -> str:
    """A new student trained with `method` (kd, fd-kl, fd-lm, dynamic-fd) toward the plain old."""
    return plan.add(
        f"s{seed}/new/{method}",
        "new",
        seed_of(seed, "new", STUDENT_OFFSET),
        Objective(method, alpha=plan.mode.fd_alpha),
        {"old": (plain(plan, seed, "old"),)},
    )


def bcwi(plan: Planner, seed: int) -> str:
    """BCWI: fine-tune from the plain old model on the new data, then interpolate (α on val)."""
    old = plain(plan, seed, "old")
    tuned = plan.add(
        f"s{seed}/new/bcwi-finetune", "new", seed_of(seed, "new", STUDENT_OFFSET), init_from=old, like="old"
    )
    return plan.add(
        f"s{seed}/new/bcwi",
        "new",
        seed_of(seed, "new", STUDENT_OFFSET),
        references={"old": (old,), "new": (tuned,)},
        kind="bcwi",
        like="old",
    )


@dataclass(frozen=True)
class Row:
    """One line of the results table: `old` and `new` are ensembles of planned names (mean logits)."""

    method: str
    old: tuple[str, ...]
    new: tuple[str, ...]


def table_rows(plan: Planner, seed: int, num_classes: int) -> list[Row]:
    """The main table's rows for one seed, adding the jobs they need."""
    mode, old = plan.mode, (plain(plan, seed, "old"),)
    rows = [Row("none", old, (plain(plan, seed, "new"),))]
    rows += [Row(method, old, (toward_old(plan, seed, method),)) for method in mode.toward_old]
    rows.append(
        Row(f"paragon ({mode.m}×, both ends)", replicas(plan, seed, "old", mode.m), replicas(plan, seed, "new", mode.m))
    )
    for k in dict.fromkeys((num_classes, min(mode.k_small, num_classes))):
        label = "all" if k >= num_classes else str(k)
        rows.append(
            Row(
                f"elodi K={label} (both ends)",
                (elodi(plan, seed, "old", mode.m, k),),
                (elodi(plan, seed, "new", mode.m, k),),
            )
        )
    rows.append(Row("plain old → elodi K=all", old, (elodi(plan, seed, "new", mode.m, num_classes),)))
    rows.append(
        Row(
            f"plain old → elodi K=all + legacy (λ={mode.legacy_weight})",
            old,
            (elodi(plan, seed, "new", mode.m, num_classes, legacy=True),),
        )
    )
    rows.append(Row("bcwi", old, (bcwi(plan, seed),)))
    return rows


def chain_versions(plan: Planner, seed: int, num_classes: int) -> dict[str, tuple[str, ...]]:
    """v1 → old → new, plain and with ELODI on every version (K = all, m)."""
    return {
        "plain": tuple(plain(plan, seed, v) for v in VERSIONS),
        "elodi": tuple(elodi(plan, seed, v, plan.mode.m, num_classes) for v in VERSIONS),
    }


def curve_rows(plan: Planner, seed: int, num_classes: int) -> dict[int, dict[str, Row]]:
    """For each ensemble size m: the paragon and ELODI (both ends, K = all) with m replicas."""
    return {
        m: {
            "paragon": Row("paragon", replicas(plan, seed, "old", m), replicas(plan, seed, "new", m)),
            "elodi": Row(
                "elodi", (elodi(plan, seed, "old", m, num_classes),), (elodi(plan, seed, "new", m, num_classes),)
            ),
        }
        for m in plan.mode.curve
    }


@dataclass
class Layout:
    """Everything one run evaluates, per seed; the planner holds the jobs in submission order."""

    plan: Planner
    rows: dict[int, list[Row]]
    chains: dict[int, dict[str, tuple[str, ...]]]
    curves: dict[int, dict[int, dict[str, Row]]]


def layout(mode: Mode, seeds: int, folder: Path, num_classes: int = 10, first_seed: int = 0) -> Layout:
    """Plan the main table for seeds first_seed … first_seed + seeds − 1 first, then the chains, then
    the m curves (`curve_seeds` of them). A seed's models do not depend on the other seeds, so seeds run
    on separate machines (`--first-seed`) give the same models as one run of all of them."""
    plan = Planner(mode, folder)
    every = range(first_seed, first_seed + seeds)
    curve_seeds = every[: mode.curve_seeds or seeds]
    if mode.curve_first:  # ELODI's models first: under a deadline they are the ones that get trained
        plan.group = "curve"
        curves = {s: curve_rows(plan, s, num_classes) for s in curve_seeds}
        plan.group = "table"
    rows = {s: table_rows(plan, s, num_classes) for s in every}
    plan.group = "chain"
    chains = {s: chain_versions(plan, s, num_classes) for s in every} if mode.chain else {}
    if not mode.curve_first:
        plan.group = "curve"
        curves = {s: curve_rows(plan, s, num_classes) for s in curve_seeds}
    return Layout(plan, rows, chains, curves)


def prune(layout: Layout, available: set[str]) -> Layout:
    """The layout without what lacks a trained model (a run stopped by its deadline): rows missing in
    any seed, chains and curve points with a missing member. `none` and the paragon must remain."""

    def complete(row: Row) -> bool:
        return set(row.old) | set(row.new) <= available

    def usable(seed: int) -> bool:  # a seed counts once its no-treatment and paragon rows are trained
        rows = layout.rows[seed]
        return all(complete(r) for r in rows if r.method == "none" or r.method.startswith("paragon"))

    seeds = [s for s in sorted(layout.rows) if usable(s)] or sorted(layout.rows)[:1]
    keep = [i for i in range(len(layout.rows[seeds[0]])) if all(complete(layout.rows[s][i]) for s in seeds)]
    kept = {layout.rows[seeds[0]][i].method for i in keep}
    if "none" not in kept or not any(m.startswith("paragon") for m in kept):
        raise ValueError("too few trained models for a table: no treatment and the paragon are needed")
    rows = {s: [layout.rows[s][i] for i in keep] for s in seeds}
    chains = {s: c for s, c in layout.chains.items() if s in seeds and all(set(v) <= available for v in c.values())}
    curves = {
        s: {m: c for m, c in curve.items() if all(complete(r) for r in c.values())}
        for s, curve in layout.curves.items()
        if s in seeds
    }
    common = set.intersection(*(set(c) for c in curves.values())) if curves else set()
    curves = {s: {m: c for m, c in curve.items() if m in common} for s, curve in curves.items()}
    return Layout(layout.plan, rows, chains if len(chains) == len(layout.chains) else {}, curves)
