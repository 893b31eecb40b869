"""A walk of `congruent run`'s spec through the code: which modules the driver process passes through,
how often it climbs back up, and how often it goes back to planning once the plan is made.

    python -m benchmarks.code.walk --json                          # this checkout's figures
    python -m benchmarks.code.walk --baseline DIR --write          # against another checkout (an older
                                                              # commit's worktree), into docs/architecture.md

An update of two versions on a Fashion-MNIST slice — v1 without treatment, registered and promoted,
then v2 with ELODI (m 2, a pool of 2 teacher actors) from `NAME@champion` — runs through `congruent
run` on an embedded Ray (each version's its own) and a local MLflow store. v2's run is traced in the driver process
(`sys.setprofile`: every call into the project's own code, and every call of an lru_cache'd project
function, whose cache hits make no frame; Ray's workers run the stage bodies in other processes and
are not traced). Counted:

- a **step**: a call from one project module into another (the nearest project frame is the caller);
- a **climb back up**: a step against the direction of imports — into a module that imports the
  caller's module, directly or through others (grimp's graph of the same checkout, imports inside
  functions included). In a project whose imports point one way only a callback climbs; a circle
  of imports makes every call between its modules one;
- a **return for a decision**: after preflight has returned its Plan (`preflight`, or `plan_of`), a
  step into preflight, the streaming decision, model inputs, one of preflight's checks
  (planning/facts/), or (from the orchestrator) the splits' resolution in `workers.tasks.resolve` —
  the run going back to decide again, or back to the data, instead of
  reading what the Plan carries. (The Plan's own methods and plan.py's pure helpers are not one.)
- a **return to a room already left**: the walk as a reader follows it from `run(args)`, each
  function read once, at its first call (`rooms_revisited`): arriving, by a call or by going back to
  a caller, in a module the reader was in before and had left — what one long function calling into
  many modules costs its reader.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from datetime import date
from pathlib import Path

from benchmarks.report import RESULTS_DIR, ROOT, markdown_table, write_section

PACKAGES = ("orchestrator", "workers", "pipelines")
SECTION = "## A walk of `congruent run` through the code"
V1 = """model: walk
version: v1
data: {dataset: fashion-mnist, train_limit: 600, eval_limit: 300}
arch: mlp-small
method: {name: none}
train: {epochs: 1, batch_size: 128, seed: 0}
promote: {max_nfr: 1.0, max_er_increase: 1.0}
storage: STORAGE
"""
V2 = """model: walk
version: v2
old: walk@champion
data: {dataset: fashion-mnist, train_limit: 600, eval_limit: 300}
arch: mlp-small
method: {name: elodi, m: 2, alpha: 0.8, k: 10}
train: {epochs: 1, batch_size: 128, seed: 0}
resources: {replica: {cpus: 1}, student: {cpus: 1}, teacher: {cpus: 0.5}, teacher_actors: 2}
storage: STORAGE
"""

# Runs inside the measured checkout (cwd and sys.path[0] are that tree): v1 untraced, v2 traced.
TRACER = r"""
import json, os, sys
sys.path.insert(0, os.getcwd())
import grimp
from orchestrator.cli import main

v1, v2, out, runs = sys.argv[1:5]
try:
    main(["run", v1, "--quiet", "--out", runs + "/v1"])
except SystemExit as e:
    assert not e.code, f"v1 failed: {e.code}"
import ray

ray.shutdown()  # v2's run starts its own embedded Ray, as a command does: connect is part of the walk
ROOT = os.getcwd() + os.sep
PACKAGES = ("orchestrator", "workers", "pipelines")
module_of_file = {}

def module_of(code):
    name = module_of_file.get(code.co_filename)
    if name is None:
        path = code.co_filename
        name = ""
        if path.startswith(ROOT) and path.endswith(".py"):
            dotted = path[len(ROOT):-3].replace(os.sep, ".").removesuffix(".__init__")
            if dotted.split(".")[0] in PACKAGES:
                name = dotted
        module_of_file[code.co_filename] = name
    return name

steps = []
preflight_done = [False]
moves = []  # ["call" | "return", frame id, the function's key, its module, its caller's module], between modules
crossing = set()  # ids of the frames entered from another module, whose return is a move too

def profile(frame, event, arg):
    if event not in ("call", "return"):
        return
    callee = module_of(frame.f_code)
    if not callee:
        return
    if event == "return":
        if id(frame) in crossing:
            crossing.discard(id(frame))
            moves.append(["return", id(frame), "", callee, ""])
        return
    caller_frame = frame.f_back
    while caller_frame is not None and not module_of(caller_frame.f_code):
        caller_frame = caller_frame.f_back
    if caller_frame is None:
        return
    caller = module_of(caller_frame.f_code)
    if caller != callee:
        steps.append((caller, callee, frame.f_code.co_qualname, preflight_done[0]))
        code = frame.f_code
        key = f"{code.co_filename}:{code.co_firstlineno}:{code.co_qualname}"
        crossing.add(id(frame))
        moves.append(["call", id(frame), key, callee, caller])

import orchestrator
preflight_module = next(
    m for m in ("orchestrator.planning.preflight", "orchestrator.driver.preflight")
    if os.path.exists(m.replace(".", "/") + ".py")
)
import importlib
pre = importlib.import_module(preflight_module)


def planned_by(original):
    def traced(*args, **kwargs):  # what returns the Plan: after it, a step back to planning is a return
        plan = original(*args, **kwargs)
        preflight_done[0] = True
        return plan
    return traced


for function in ("preflight", "plan_of"):  # plan_of: the layout with preflight's checks as facts
    original = getattr(pre, function, None)
    if original is None:
        continue
    traced = planned_by(original)
    setattr(pre, function, traced)
    for name, module in list(sys.modules.items()):  # modules that imported it by name
        if name.split(".")[0] == "orchestrator" and getattr(module, function, None) is original:
            setattr(module, function, traced)

tracing = [False]


def counted(function, home, name):
    # an lru_cache'd function, seen: a cache hit makes no Python frame for the profiler
    def wrapper(*args, **kwargs):
        caller = sys._getframe(1)
        while caller is not None and not module_of(caller.f_code):
            caller = caller.f_back
        if tracing[0] and caller is not None and module_of(caller.f_code) != home:
            steps.append((module_of(caller.f_code), home, name, preflight_done[0]))
        return function(*args, **kwargs)
    wrapper.cache_info, wrapper.cache_clear = function.cache_info, function.cache_clear
    return wrapper


for name, module in list(sys.modules.items()):
    if name.split(".")[0] not in PACKAGES:
        continue
    for attribute, value in list(vars(module).items()):
        if hasattr(value, "cache_info") and getattr(value, "__module__", None) == name:
            wrapped = counted(value, name, getattr(value, "__qualname__", attribute))
            for other in list(sys.modules.values()):  # every module that imported it by name
                if getattr(other, "__name__", "").split(".")[0] in PACKAGES and vars(other).get(attribute) is value:
                    setattr(other, attribute, wrapped)

tracing[0] = True
sys.setprofile(profile)
try:
    main(["run", v2, "--quiet", "--out", runs + "/v2"])
except SystemExit as e:
    sys.setprofile(None)
    assert not e.code, f"v2 failed: {e.code}"
sys.setprofile(None)
graph = grimp.build_graph(*PACKAGES)
pairs = {(a, b) for a, b, _, _ in steps}
upstream = {}  # module → the modules it imports, directly or through others
for b in {b for _, b in pairs if b in graph.modules}:
    upstream[b] = graph.find_upstream_modules(b)
upward = {(a, b) for a, b in pairs if b in upstream and a in upstream[b]}  # b imports a: a call against imports
json.dump({"steps": steps, "upward": sorted(upward), "moves": moves}, open(out, "w"))
"""


def measure(tree: Path) -> dict:
    """Run the two versions in `tree` and count its walk (module docstring)."""
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        v1, v2 = work / "v1.yaml", work / "v2.yaml"
        v1.write_text(V1.replace("STORAGE", str(work / "storage")))
        v2.write_text(V2.replace("STORAGE", str(work / "storage")))
        env = {
            **os.environ,
            "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}",
            "PYTHONPATH": str(tree),
            "RAY_ADDRESS": "",
        }
        env.pop("RAY_ADDRESS")
        out = work / "walk.json"
        subprocess.run(
            [sys.executable, "-c", TRACER, str(v1), str(v2), str(out), str(work / "runs")],
            cwd=tree,
            env=env,
            check=True,
            timeout=1800,
            stdout=subprocess.DEVNULL,
        )
        raw = json.loads(out.read_text())
    return {**summarise(raw["steps"], {tuple(p) for p in raw["upward"]}), **rooms_revisited(raw.get("moves", []))}


DECIDING = ("preflight", "stream_plan", "streaming", "model_inputs")


def is_decision(caller: str, callee: str, function: str) -> bool:
    """A step back to planning's deciding modules or, from the orchestrator, to the splits'
    resolution in workers.tasks.resolve (module docstring)."""
    planning = callee.split(".")[0] == "orchestrator" and callee.rsplit(".", 1)[-1] in DECIDING
    planning = planning or callee.startswith("orchestrator.planning.facts.")  # one of preflight's checks
    return planning or (callee == "workers.tasks.resolve" and caller.split(".")[0] == "orchestrator")


def summarise(steps: list, upward: set[tuple[str, str]]) -> dict:
    """Steps, modules, climbs back up (steps in `upward`: against the imports) and returns for a
    decision after the plan was made, with the modules each happens between."""
    climbs = Counter(f"{a} → {b}" for a, b, _, _ in steps if (a, b) in upward)
    returns = Counter(
        f"{a} → {b}.{function}" for a, b, function, after in steps if after and is_decision(a, b, function)
    )
    modules = {m for a, b, _, _ in steps for m in (a, b)}
    return {
        "steps": len(steps),
        "modules": len(modules),
        "climbs": sum(climbs.values()),
        "climbs_by_pair": dict(climbs.most_common()),
        "returns_for_a_decision": sum(returns.values()),
        "returns_by_call": dict(returns.most_common()),
    }


def rooms_revisited(moves: list, root: str = "orchestrator.commands.run") -> dict:
    """The walk as a reader follows it from `run(args)`: each function read once, at its first call
    (a later call of it is not followed; the functions it calls are, where they are new), so the
    reader is in the module of the innermost function being read, and goes back to its caller's
    when it is done. A **return to a room already left**: arriving — by a call or by going back —
    in a module the reader was in before and had left. `moves` are the calls between modules and
    their returns, in order (the tracer's). The walk is the one inside `root`'s `run`: what the
    command line does before calling it (building its parser from every command's `register`) and
    after is not followed; moves that never enter `run` (a walk written from inside it) all are."""
    moves = inside_run(moves, root)
    read: set[str] = set()
    stack: list[tuple[int, str | None]] = []  # (frame id, its module if it was read at this call, else None)
    room, visited, revisits = root, {root}, Counter[str]()

    def arrive(module: str) -> None:
        nonlocal room
        if module != room:
            if module in visited:
                revisits[module] += 1
            visited.add(module)
            room = module

    for event, frame, key, module, _ in moves:
        if event == "call":
            new = key not in read
            read.add(key)
            stack.append((frame, module if new else None))
            if new:
                arrive(module)
        else:
            while stack and stack[-1][0] != frame:  # frames whose return the tracer did not see (an exception)
                stack.pop()
            if stack:
                stack.pop()
            arrive(next((m for _, m in reversed(stack) if m is not None), root))
    return {
        "rooms": len(visited),
        "returns_to_a_room_left": sum(revisits.values()),
        "returns_by_room": dict(revisits.most_common()),
    }


def inside_run(moves: list, root: str) -> list:
    """The moves from the call of `root`'s `run(args)` to its return (all of them if it is not called)."""
    start = next(
        (
            i
            for i, (event, _, key, module, _) in enumerate(moves)
            if event == "call" and module == root and key.endswith(":run")
        ),
        None,
    )
    if start is None:
        return moves
    frame = moves[start][1]
    end = next(
        (i for i in range(start + 1, len(moves)) if moves[i][0] == "return" and moves[i][1] == frame), len(moves)
    )
    return moves[start + 1 : end]


RESULTS = RESULTS_DIR / "walk-results.json"
DOC = Path("docs/architecture.md")


def report(before: dict, after: dict, baseline: str) -> str:
    """docs/architecture.md's section: the two walks side by side, and what is left."""
    rows = [
        [name, str(before[key]), str(after[key])]
        for name, key in (
            ("steps (calls between project modules)", "steps"),
            ("modules passed through", "modules"),
            ("climbs back up (calls against the imports)", "climbs"),
            ("returns for a decision after the plan", "returns_for_a_decision"),
            ("returns to a room already left, reading from `run(args)`", "returns_to_a_room_left"),
        )
    ]
    climbs_before = before["climbs"] + before["returns_for_a_decision"]
    climbs_after = after["climbs"] + after["returns_for_a_decision"]
    left = "; ".join(f"{call} ×{n}" for call, n in {**after["climbs_by_pair"], **after["returns_by_call"]}.items())
    was = "; ".join(f"{call} ×{n}" for call, n in {**before["climbs_by_pair"], **before["returns_by_call"]}.items())
    rooms = ", ".join(f"{room} ×{n}" for room, n in list(after["returns_by_room"].items())[:6])
    rooms_before = ", ".join(f"{room} ×{n}" for room, n in list(before["returns_by_room"].items())[:6])
    return (
        f"Command: `python -m benchmarks.code.walk --baseline <worktree of {baseline}> --write` ({date.today()}, "
        "2 CPU cores; raw figures in docs/results/walk-results.json). The module docstring of benchmarks/code/walk.py "
        "says what is traced and how each figure is counted.\n\n"
        + markdown_table(["v2 (ELODI m 2, pool of 2) through `congruent run`", baseline, "this layout"], rows)
        + f"\n\nClimbs and returns together: {climbs_before} before, {climbs_after} now.\n\n"
        f"- Before: {was or 'none'}.\n- Now: {left or 'none'}.\n\n"
        f"The rooms a reader comes back to most: before {rooms_before}; now {rooms}.\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout to walk (default: this one)")
    parser.add_argument("--baseline", type=Path, help="another checkout to walk first, for comparison")
    parser.add_argument(
        "--baseline-name", default="the previous layout", help="what the baseline is called in the table"
    )
    parser.add_argument(
        "--write", action="store_true", help="write docs/results/walk-results.json and the docs section"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    figures = {"this": measure(args.tree.resolve())}
    if args.baseline is not None:
        # the commit goes to the raw figures, not the page: the docs say today's standing, git its history
        commit = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=args.baseline, text=True).strip()
        figures["baseline"] = {"name": args.baseline_name, "commit": commit, **measure(args.baseline.resolve())}
    if args.write:
        assert "baseline" in figures, "--write compares against --baseline"
        RESULTS.write_text(json.dumps(figures, indent=1, ensure_ascii=False) + "\n")
        write_section(DOC, SECTION, report(figures["baseline"], figures["this"], figures["baseline"]["name"]))
    print(json.dumps(figures, indent=1, ensure_ascii=False) if args.json else figures)


if __name__ == "__main__":
    main()
