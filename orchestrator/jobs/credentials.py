"""How `submit --env-from-here` hands a job this environment's MLflow and S3 settings without any
of them reaching the job's visible state.

A Ray Job's `runtime_env.env_vars` are shown to anyone who can read the cluster's jobs: the
dashboard, `ray job list`, the Jobs REST API (`get_job_info`, `list_jobs`), and the runtime envs
of the job's tasks. So the settings travel as a file (CREDENTIALS_FILE, mode 0600) inside the job's
working_dir package, which only the cluster's nodes unpack. The driver reads it into its own
environment and deletes its copy (`load_into_driver`); every worker process of the job reads it
from its working_dir before it runs anything (`load_into_worker`, the runtime_env's
`worker_process_setup_hook`: a module path, not a value). A worker's reading tasks are then given
no secret in their own runtime_env either (host.CREDENTIALS_FROM_FILE, dataplane/objects.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from orchestrator.host import CREDENTIALS_FROM_FILE

CREDENTIALS_FILE = ".congruent-credentials.json"
WORKER_HOOK = "orchestrator.jobs.credentials.load_into_worker"


def write_credentials(folder: Path, settings: dict[str, str]) -> Path:
    """The settings as CREDENTIALS_FILE in `folder`, readable by this user only."""
    path = folder / CREDENTIALS_FILE
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        json.dump(settings, file)
    return path


def _load(path: Path) -> bool:
    """Put the file's settings into this process's environment, over the node's own (what
    --env-from-here asks, as env_vars did); whether there was a file."""
    try:
        settings = json.loads(path.read_text())
    except FileNotFoundError:
        return False
    for name, value in settings.items():
        os.environ[str(name)] = str(value)
    os.environ[CREDENTIALS_FROM_FILE] = "1"
    return True


def load_into_driver(folder: Path = Path(".")) -> bool:
    """In a job's driver: load CREDENTIALS_FILE from `folder` (the driver's own copy) and delete it."""
    path = folder / CREDENTIALS_FILE
    loaded = _load(path)
    if loaded:
        path.unlink()
    return loaded


def load_into_worker() -> None:
    """In each worker process of a job (`worker_process_setup_hook`): load CREDENTIALS_FILE from the
    job's working_dir, the worker's current directory, when the job was sent one."""
    _load(Path.cwd() / CREDENTIALS_FILE)
