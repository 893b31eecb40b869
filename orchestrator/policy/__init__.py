"""Policy: the promotion gate's decision, the protected set's counts and auto's choice, over plain records.

    promotion.py  a candidate against the champion: eval counts, slices, protected flips, live
                  sessions (read by tracking/promotion.py) → a Verdict and the reason in one line
    protected.py  a version's answers on the protected set: right, and flipped against another
    auto_choice.py  method auto: each candidate's paired counts against no treatment, its ER and NFR
                  bounds, tested in a fixed order; which ships, or which came closest

The gate is the spec's type (pipelines.operations.PromoteSpec); what the records hold is read from
the registry by orchestrator/tracking/, which calls this package and writes what it decides.

May import: numpy, `workers` (confidence bounds, flips, slices), `pipelines` (the gate's type).
Never imports mlflow, ray, torch or orchestrator.tracking (an import-linter contract): a decision
here can be tested with numbers alone.
"""
