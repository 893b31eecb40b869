"""The front door: what `run`, `tune`, `demo` and `submit` do before their work and around it, written
once, so every command finds the same problems in the same words and reports them all at once.

    prepare(spec_path, address, out)   the spec, its plan (preflight's checks and what the cluster can
                                       hold), the output folder, the MLflow store: Prepared, or Refused
                                       with every problem, one line each, before Ray starts
    execute(prepared, quiet)           join the cluster (or start Ray here) and run the pipeline
    execute_search(prepared, ...)      the same for `tune` (`prepare(..., search=True)`)
    prepare_demo(settings, out_given)  the demo's two specs checked as a chain (v2 against what v1 registers)
    load(spec_path)                    the spec alone (`submit`: the rest is checked where the job runs)

A command prints a Refused's lines and exits with its code: 2 for the inputs, 1 for an MLflow store that
cannot be reached.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.spec import SpecError, UpdateSpec

if TYPE_CHECKING:
    from orchestrator.driver.demo import DemoSettings
    from orchestrator.driver.publish import PipelineResult
    from orchestrator.driver.tune import SearchRecord
    from orchestrator.planning.plan import Demand, Plan

SEARCH_SUFFIX = "-tune"  # a search's default output folder: runs/MODEL/VERSION-tune


@dataclass(frozen=True)
class Refused:
    """Why a command cannot start: every problem, one line each, and its exit code (2: the inputs;
    1: the MLflow store cannot be reached)."""

    problems: list[str]
    code: int = 2


class PipelineFailed(RuntimeError):
    """A stage of the pipeline failed (its MLflow run is then FAILED and nothing was registered); the
    message is the cause's type and first line (a RayTaskError's: the worker's exception)."""

    @classmethod
    def of(cls, error: BaseException) -> PipelineFailed:
        from workers.errors import first_line

        cause = getattr(error, "cause", None) or error
        return cls(f"{type(cause).__name__}: {first_line(cause)}")


@dataclass(frozen=True)
class Prepared:
    """A spec that passed every check: its plan, where its results go, the cluster it runs on."""

    plan: Plan
    run_dir: Path
    address: str | None


def load(spec_path: str) -> UpdateSpec | Refused:
    """The spec at `spec_path`, else its problems (each line names the file)."""
    from pipelines.spec import load_spec

    try:
        return load_spec(spec_path)
    except SpecError as e:
        return Refused(e.problems)


def output_problems(folder: str | Path, option: str | None) -> list[str]:
    """The problem of a command's output folder (`option`: the flag that named it, None: the
    default) that cannot be created and written, checked before any work."""
    from workers import storage

    try:
        storage.check_writable(str(folder))
    except storage.StorageError as e:
        return [f"{option or 'output folder'}: {e}"]
    return []


def store_refusal() -> Refused | None:
    """Refused (exit 1) when the MLflow store cannot be reached: it fails in bounded time."""
    from orchestrator.tracking.store import TrackingUnavailable, check_store

    try:
        check_store()
    except TrackingUnavailable as e:
        return Refused([str(e)], 1)
    return None


def search_demand(spec: UpdateSpec) -> Demand:
    """What a Tune search asks of the cluster: the replicas, then one student per trial beside the
    shared teacher pool."""
    from orchestrator.planning.plan import Demand

    return Demand(True, True, spec.resources.teacher_actors)


def prepare(spec_path: str, address: str | None, out: str | None, search: bool = False) -> Prepared | Refused:
    """Every check of a run (`search`: of a Tune search) before Ray starts and before the MLflow run
    opens, so a refusal leaves nothing behind: the spec, the data, old model, registry, storage and
    what the cluster can hold (this machine's cores for an embedded Ray, not started yet), the output
    folder — every problem at once, as `congruent check` finds them — then the MLflow store."""
    from orchestrator.driver.check import checked_plan
    from orchestrator.planning.plan import cluster_demand

    spec = load(spec_path)
    if isinstance(spec, Refused):
        return spec
    untuned = search and spec.tune is None
    lines = ["tune: the spec has no tune section (search space, search, num_samples)"] if untuned else []
    plan, found = checked_plan(spec, address, search_demand if search else cluster_demand)
    problems = [f"{spec_path}: {line}" for line in [*lines, *found]]
    run_dir = Path(out) if out else Path("runs", spec.model, spec.version + (SEARCH_SUFFIX if search else ""))
    problems += output_problems(run_dir, "--out" if out else None)
    if problems or plan is None:
        return Refused(problems)
    return store_refusal() or Prepared(plan, run_dir, address)


def execute(prepared: Prepared, quiet: bool | None) -> PipelineResult:
    """Join the cluster (or start Ray here) and run the pipeline, its progress shown unless `quiet`
    (views/progress.py: bars on a terminal, else lines); PipelineFailed when a stage fails."""
    from orchestrator.driver.pipeline import run_pipeline
    from orchestrator.execution.cluster import connect
    from orchestrator.execution.watch import StageWatch
    from orchestrator.views.progress import make_display

    plan = prepared.plan
    connect(prepared.address, dashboard=plan.data_parallel)
    watch = StageWatch(make_display(quiet))
    watch.display.prefix = f"{plan.spec.version} "
    try:
        return run_pipeline(plan, prepared.run_dir, watch)
    except Exception as e:  # Ctrl-C (KeyboardInterrupt) is not one: it goes to the command as it is
        raise PipelineFailed.of(e) from e
    finally:
        watch.close()


def execute_search(prepared: Prepared, quiet: bool | None, register_best: bool) -> tuple[SearchRecord, Any]:
    """Join the cluster (or start Ray here) and run the Tune search: its record and, with
    `register_best`, the registered pick's PipelineResult."""
    from orchestrator.driver.tune import run_search
    from orchestrator.execution.cluster import connect
    from orchestrator.execution.watch import StageWatch
    from orchestrator.views.progress import make_display

    # the trials report through Tune; their own output (a stopped trial's SIGTERM traceback) stays in Ray's logs
    connect(prepared.address, worker_logs=False)
    watch = StageWatch(make_display(quiet))
    try:
        return run_search(prepared.plan, prepared.run_dir, watch, register_best)
    finally:
        watch.close()


def demo_problems(settings: DemoSettings) -> list[str]:
    """The demo's two specs checked as `congruent check v1 v2` checks a chain: v2's old model is the
    version v1 will register, so v2 is checked against v1's data and model shape, not the registry,
    and only once v1's checks pass (v2 reads the same data)."""
    from orchestrator.driver.check import check_in_chain
    from orchestrator.driver.demo import demo_specs
    from pipelines.spec import parse_spec

    problems: list[str] = []
    specs = []
    for document in demo_specs(settings, f"{settings.model}@challenger"):
        try:
            specs.append(parse_spec(document))  # --m, --epochs … in range
        except SpecError as e:
            problems += e.problems
    if problems:
        return list(dict.fromkeys(problems))  # a setting both specs share is said once
    upcoming: dict[str, Any] = {}
    for spec in specs:  # v2 only once v1 passes: without v1's shape its old would be looked up in the registry
        problems += check_in_chain(spec, None, upcoming)[0]
        if problems:
            break
    return problems


def prepare_demo(settings: DemoSettings, out_given: bool) -> Refused | None:
    """Every check of the demo before Ray starts: its output folder, then both specs (see
    `demo_problems`); None when the demo can start."""
    problems = output_problems(settings.out, "--out" if out_given else None)
    problems += demo_problems(settings)
    return Refused(problems) if problems else None
