"""`congruent protect MODEL PATH` or `congruent protect MODEL --from-flips V`: samples every later
version of a model must keep — a table's rows, or the samples version V flipped against its parent —
added to the model's protected set (a new set version; the old rows stay), which `promote` then
gates on (`--max-protected-flips`) and `versions --protected` shows."""

from __future__ import annotations

import argparse

from orchestrator.commands.options import fail


def run(args: argparse.Namespace) -> int:
    from orchestrator.driver.errors import RegistryError
    from orchestrator.driver.protect import protect_in_store
    from workers.errors import DataError

    if (args.path is None) == (args.from_flips is None):
        return fail("protect", "give a table of samples or --from-flips VERSION, one of them")
    try:
        version, added, total = protect_in_store(args.model, args.path, args.from_flips)
    except (RegistryError, DataError) as e:
        return fail("protect", str(e))
    print(f"{args.model}: protected set {version}: {added:,} samples added, {total:,} in all")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "protect",
        help="samples every later version must keep (a regression suite, gated by promote)",
        description=(
            "Add samples to MODEL's protected set: the rows of a table read with the champion's spec columns "
            "(text, label, id; labels among its classes), for an image model the images of a folder of class "
            "folders (CLASS/FILE, kept with the set), or the samples VERSION flipped against its parent (from "
            "the ledgers, the texts or image files read back from its data). promote refuses a version that "
            "gets a protected sample wrong the champion gets right (--max-protected-flips N allows N); "
            "versions --protected shows each version on the set; train.protected_weight trains on them."
        ),
    )
    parser.add_argument("model", help="the registered model's name")
    parser.add_argument(
        "path",
        nargs="?",
        default=None,
        metavar="PATH",
        help="a .csv/.tsv/.jsonl/.parquet table; an image model: a folder of class folders",
    )
    parser.add_argument("--from-flips", metavar="VERSION", default=None, help="protect the samples VERSION flipped")
    parser.set_defaults(func=run)
