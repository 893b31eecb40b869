"""What people look at: number formats, CLI tables (rich), progress displays, every plot
(matplotlib, one backend setup) and the HTML report (a Jinja2 template with autoescape).

Views render what they are given; they read no MLflow store and start no Ray work. May import:
rich, matplotlib, jinja2, numpy, PIL, `workers.progress` (the progress event) — no torch, ray or mlflow.
"""
