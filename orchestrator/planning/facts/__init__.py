"""Preflight's checks, one module each: a function from the facts found so far (`Found`, kinds.py)
to one typed fact or the problems it found, one line each, named by the field they concern.

    kinds.py          the facts (one type per check) and `Found`, what a check reads
    old_version.py    `old`: a path, a registry version (resolved to a local copy), one an earlier
                      spec of the same `congruent check` registers, or an MLflow model Congruent did not train
    architecture.py   `arch` resolves (a user factory is imported here, not in a worker)
    source.py         the data source: streaming settled, a streamed source opened
    protected_training.py  `train.protected_weight`: the model's protected set, the rows that join train
    data.py           the splits, read (held data) or taken from the opened stream
    stream_support.py what the spec asks of a streamed source that it does not do yet
    old_answers.py    a foreign old model answers class probabilities of the data's classes (its answer table's name)
    old_model.py      the old checkpoint loaded (its architecture, classes, what it reads)
    old_fit.py        the old model against the data and the method (class count, inputs, bcwi, proximal, init: old)
    auto_candidates.py  method auto: the candidates it trains (bcwi, proximal where they can start from the old weights)
    init_file.py      `init`'s weights can be read here
    inputs.py         what the new models read: the tokenizer trained, the images' normalisation
    init_fit.py       `init`'s weights and `train.adapter`'s targets fit the version's model
    shared_eval.py    the old registry version was evaluated on enough of this eval split
    slices.py         `data.slice_columns` are the table's columns, `data.slices` reads
    storage.py        `storage` can be written

The order they run in is preflight.py's CHECKS; a check that needs a fact an earlier check could
not find finds nothing (the earlier problem is the one reported). No check module imports another
(an import-linter contract in pyproject.toml): what one needs of another comes through `Found`.
"""
