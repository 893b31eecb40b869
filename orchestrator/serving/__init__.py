"""Serving registered versions on Ray Serve (`congruent serve`): the champion answers, a candidate
is shadowed off the response path, and their answers go to the live ledger
(orchestrator/tracking/live.py).

- requests.py: what a request and a feedback body hold, checked (pure);
- predictor.py: a registered version's checkpoint answering raw texts or encoded images (torch);
- shadow.py: sending the picked samples to the candidate after the response (plain asyncio);
- ledger.py: the live ledger's Ray Serve deployment (chunks in the session's run);
- settings.py: how it serves, what a replica holds (plain values);
- deployments.py: the gateway and version deployments, and the applications.

The store is reached through `orchestrator.tracking` only: never mlflow itself.
"""
