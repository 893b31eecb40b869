"""What the fidelity benchmark trains: one job per model, shared across methods (the modes: modes.py).

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
- fine-tuning modes: `s{s}/new-from-old/…`, the new replicas and students again, each started from
  the plain old model's weights (`init: old` with the plain model deployed); `Layout.from_old`.
- adapter modes (every model a LoRA adapter): `s{s}/{v}/full-fine-tuning`, the plain model without it.

A job's output path holds a digest of everything that determines it (data, architecture, train
config, objective, references' paths, start weights), so a rerun reuses finished models and a
changed setting trains a new one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from benchmarks.fidelity.inputs import first_texts, inputs_of, request_of
from benchmarks.fidelity.modes import Mode
from workers.data.input_spec import InputSpec
from workers.tasks.records import DataRequest, TrainJob
from workers.training.config import TrainConfig
from workers.training.objectives import Objective

VERSIONS = ("v1", "old", "new")
STUDENT_OFFSET = 500


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
    start: Literal["scratch", "old"] = "scratch"  # "old": new-version models start from the plain old model

    def data(self, version: str) -> DataRequest:
        """The version's data: its first `train_sizes` training samples; eval and val are the same for all."""
        limit = self.mode.train_sizes[VERSIONS.index(version)]
        return request_of(self.mode.dataset, limit, self.mode.eval_limit, self.mode.val_fraction)

    def student_data(self, version: str) -> DataRequest:
        """An ELODI student's data: the version's, and with `elodi_inputs` > 1 the texts of the first
        elodi_inputs × its slice's training samples, unlabelled (the loader leaves its own slice's out)."""
        data = self.data(version)
        if self.mode.elodi_inputs == 1:
            return data
        assert data.train_limit is not None, "unlabelled texts are the training texts after a limited slice"
        texts = first_texts(replace(data, train_limit=self.mode.elodi_inputs * data.train_limit), self.folder)
        return replace(data, unlabelled=str(texts))

    def arch(self, version: str) -> str:
        return self.mode.arch if version == "new" else self.mode.old_arch or self.mode.arch

    def inputs(self, version: str) -> InputSpec | None:
        """Text: what the pipeline gives the version's architecture to read (its tokenizer, trained on
        its training split, or an hf: model's own; the spec's defaults but `max_length`); images: None."""
        return inputs_of(self.data(version), self.arch(version), self.mode.max_length) if self.mode.text else None

    def config(
        self, seed: int, epochs: int | None = None, clip: float | None = 5.0, version: str = "new", full: bool = False
    ) -> TrainConfig:
        """`full`: an adapter mode's model without its adapter, at `full_lr` (the fully fine-tuned row)."""
        old = version != "new"
        recipe = self.mode.recipe
        names = ("optimizer", "schedule", "warmup_epochs", "weight_decay_on")
        schedule = {} if recipe is None else {name: getattr(recipe, name) for name in names}
        return TrainConfig(
            epochs=epochs or (self.mode.old_epochs if old and self.mode.old_epochs else self.mode.epochs),
            lr=(self.mode.full_lr if full else self.mode.old_lr if old else None) or self.mode.lr,
            adapter=None if full else self.mode.adapter,
            seed=seed,
            device=self.mode.device,
            max_grad_norm=clip if recipe is None else recipe.max_grad_norm,
            batch_size=self.mode.batch_size,
            precision=self.mode.precision,
            weight_decay=self.mode.weight_decay,
            **schedule,
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
        data: DataRequest | None = None,
        full: bool = False,
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
        config = self.config(seed, epochs, clip, like, full)
        # a model that starts from another's weights reads its inputs as that one does (text: its tokenizer)
        inputs = self.jobs[init_from].job.inputs if init_from else self.inputs(like)
        job = TrainJob(name, data or self.data(version), self.arch(like), config, "", objective, inputs=inputs)
        # BCWI's pick depends on its val tolerance too: a changed tolerance is a new result, not the cached one
        picked_by = (self.mode.bcwi_tolerance,) if kind == "bcwi" else ()
        # (the unlabelled texts are out of the job's repr, so the digests of models without them stay as they were)
        unlabelled = (("unlabelled", job.data.unlabelled),) if job.data.unlabelled is not None else ()
        stem = str(self.folder / f"{name.replace('/', '_')}-{digest(kind, job, upstream, *picked_by, *unlabelled)}")
        init_path = f"{self.jobs[init_from].stem}.pt" if init_from else None
        job = replace(job, checkpoint_uri=f"{stem}.pt", init_from=init_path)
        self.jobs[name] = Planned(name, kind, stem, job, refs, init_from, self.group)
        return name


def seed_of(seed: int, version: str, index: int) -> int:
    """Training seed of replica `index` (or a student, index = STUDENT_OFFSET) of `version`."""
    return 10000 * seed + 1000 * VERSIONS.index(version) + index


def prefix(plan: Planner, seed: int, version: str) -> str:
    """`s{seed}/{version}`; new models that start from the old weights are `s{seed}/new-from-old`."""
    return f"s{seed}/new-from-old" if start_of(plan, seed, version) else f"s{seed}/{version}"


def start_of(plan: Planner, seed: int, version: str) -> str | None:
    """The planned model whose weights a `version` model starts from: None (from scratch), or, when the
    planner fine-tunes, the plain old model for every new-version model (what `init: old` does when the
    plain model is the deployed one: replicas, students and plain training alike)."""
    return f"s{seed}/old/replica-1" if plan.start == "old" and version == "new" else None


def replicas(plan: Planner, seed: int, version: str, count: int) -> tuple[str, ...]:
    """Names of replicas 1 … count of `version`, added if missing."""
    if start_of(plan, seed, version):
        plain(plan, seed, "old")
    return tuple(
        plan.add(
            f"{prefix(plan, seed, version)}/replica-{i}",
            version,
            seed_of(seed, version, i),
            init_from=start_of(plan, seed, version),
        )
        for i in range(1, count + 1)
    )


def plain(plan: Planner, seed: int, version: str) -> str:
    """The version's plain (no-treatment) model: its replica 1."""
    return replicas(plan, seed, version, 1)[0]


def fully_tuned(plan: Planner, seed: int, version: str) -> str:
    """An adapter mode's plain model of `version` without the adapter: every weight fine-tuned at `full_lr`."""
    return plan.add(f"s{seed}/{version}/full-fine-tuning", version, seed_of(seed, version, 1), full=True)


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
    name = f"{prefix(plan, seed, version)}/elodi-k{k}-m{m}"
    if legacy:
        references["old"] = (plain(plan, seed, "old"),)
        name = f"{prefix(plan, seed, version)}/elodi-legacy-k{k}-m{m}"
    return plan.add(
        name,
        version,
        seed_of(seed, version, STUDENT_OFFSET),
        objective,
        references,
        init_from=start_of(plan, seed, version),
        epochs=plan.mode.elodi_epochs,
        clip=plan.mode.elodi_clip,
        data=plan.student_data(version),
    )


def toward_old(plan: Planner, seed: int, method: str) -> str:
    """A new student trained with `method` (kd, fd-kl, fd-lm, dynamic-fd) toward the plain old."""
    return plan.add(
        f"{prefix(plan, seed, 'new')}/{method}",
        "new",
        seed_of(seed, "new", STUDENT_OFFSET),
        Objective(method, alpha=plan.mode.fd_alpha),
        {"old": (plain(plan, seed, "old"),)},
        init_from=start_of(plan, seed, "new"),
    )


def bcwi(plan: Planner, seed: int) -> str:
    """BCWI: fine-tune from the plain old model on the new data, then interpolate (α on val). It starts
    from the old weights either way: one model serves the scratch and the fine-tuning tables."""
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
    if mode.full_lr is not None:  # an adapter mode: the plain models fully fine-tuned, for comparison
        full = (fully_tuned(plan, seed, "old"),), (fully_tuned(plan, seed, "new"),)
        rows.append(Row("none, full fine-tuning", *full))
    rows += [Row(method, old, (toward_old(plan, seed, method),)) for method in mode.toward_old]
    rows.append(
        Row(f"paragon ({mode.m}×, both ends)", replicas(plan, seed, "old", mode.m), replicas(plan, seed, "new", mode.m))
    )
    for k in dict.fromkeys((num_classes, min(mode.k_small, num_classes))) if mode.both_ends else ():
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
    """Everything one run evaluates, per seed; the planner holds the jobs in submission order.
    `from_old`: the main table's rows again with every new model started from the plain old model's
    weights (fine-tuning modes; empty otherwise)."""

    plan: Planner
    rows: dict[int, list[Row]]
    chains: dict[int, dict[str, tuple[str, ...]]]
    curves: dict[int, dict[int, dict[str, Row]]]
    from_old: dict[int, list[Row]] = field(default_factory=dict)


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
    from_old = {}
    if mode.fine_tuning:
        plan.group, plan.start = "from-old", "old"
        from_old = {s: table_rows(plan, s, num_classes) for s in every}
        plan.start = "scratch"
    plan.group = "chain"
    chains = {s: chain_versions(plan, s, num_classes) for s in every} if mode.chain else {}
    if not mode.curve_first:
        plan.group = "curve"
        curves = {s: curve_rows(plan, s, num_classes) for s in curve_seeds}
    return Layout(plan, rows, chains, curves, from_old)


def prune(layout: Layout, available: set[str]) -> Layout:
    """The layout without what lacks a trained model (a run stopped by its deadline): rows missing in
    any seed, chains and curve points with a missing member. `none` and the paragon must remain."""

    def complete(row: Row) -> bool:
        return set(row.old) | set(row.new) <= available

    def usable(seed: int) -> bool:  # a seed counts once its no-treatment and paragon rows are trained
        rows = layout.rows[seed]
        return all(complete(r) for r in rows if r.method == "none" or r.method.startswith("paragon"))

    def table(by_seed: dict[int, list[Row]]) -> dict[int, list[Row]]:  # the rows complete in every seed
        keep = [i for i in range(len(by_seed[seeds[0]])) if all(complete(by_seed[s][i]) for s in seeds)]
        kept = {by_seed[seeds[0]][i].method for i in keep}
        if "none" not in kept or not any(m.startswith("paragon") for m in kept):
            raise ValueError("too few trained models for a table: no treatment and the paragon are needed")
        return {s: [by_seed[s][i] for i in keep] for s in seeds}

    seeds = [s for s in sorted(layout.rows) if usable(s)] or sorted(layout.rows)[:1]
    rows = table(layout.rows)
    try:
        from_old = table(layout.from_old) if layout.from_old else {}
    except ValueError:  # the fine-tuning table's models were not trained (yet): the scratch table alone
        from_old = {}
    chains = {s: c for s, c in layout.chains.items() if s in seeds and all(set(v) <= available for v in c.values())}
    curves = {
        s: {m: c for m, c in curve.items() if all(complete(r) for r in c.values())}
        for s, curve in layout.curves.items()
        if s in seeds
    }
    common = set.intersection(*(set(c) for c in curves.values())) if curves else set()
    curves = {s: {m: c for m, c in curve.items() if m in common} for s, curve in curves.items()}
    return Layout(layout.plan, rows, chains if len(chains) == len(layout.chains) else {}, curves, from_old)
