"""How long a job waited for resources, from Ray's task events and placement-group stats
(orchestrator/jobs/job_table.py), against hand-computed stretches."""

from orchestrator.jobs.job_table import covered_seconds, group_stretch, job_state, queued_stretches

# a task queued 12,728 → 16,076 ms, then run (as Ray's state API reports a task that waited for a CPU)
EVENTS = [
    {"state": "PENDING_ARGS_AVAIL", "created_ms": 12_728.0},
    {"state": "PENDING_NODE_ASSIGNMENT", "created_ms": 12_728.0},
    {"state": "SUBMITTED_TO_WORKER", "created_ms": 16_076.0},
    {"state": "RUNNING", "created_ms": 16_076.0},
    {"state": "FINISHED", "created_ms": 19_085.0},
]


def test_a_task_waits_from_its_queued_event_to_the_next():
    assert queued_stretches(EVENTS, now_ms=99_999) == [(12_728.0, 16_076.0)]
    still_queued = EVENTS[:2]
    assert queued_stretches(still_queued, now_ms=20_000) == [(12_728.0, 20_000)]
    # a retried task (its node died) is queued twice
    retried = [
        *EVENTS[:4],
        {"state": "PENDING_NODE_ASSIGNMENT", "created_ms": 17_000.0},
        {"state": "RUNNING", "created_ms": 18_500.0},
    ]
    assert queued_stretches(retried, now_ms=0) == [(12_728.0, 16_076.0), (17_000.0, 18_500.0)]


def test_a_placement_group_waits_from_its_request_to_its_creation():
    stats = {"creation_request_received_ns": "13729847775000", "end_to_end_creation_latency_us": "6100844"}
    start = 13_729_847.775
    assert group_stretch("CREATED", stats, now_ms=0) == (start, start + 6_100.844)
    assert group_stretch("PENDING", {"creation_request_received_ns": "1000000000"}, now_ms=5_000) == (1_000, 5_000)
    assert group_stretch("PENDING", {}, now_ms=5_000) is None


def test_overlapping_waits_count_once():
    assert covered_seconds([]) == 0
    assert covered_seconds([(0, 1_000), (500, 2_000), (3_000, 3_500)]) == 2.5
    assert covered_seconds([(3_000, 3_500), (0, 4_000)]) == 4.0  # one inside another
    assert covered_seconds([(0, 1_000), (1_000, 2_000)]) == 2.0  # touching


def test_a_job_waits_when_a_stage_is_queued_and_none_runs():
    assert job_state("PENDING", queued_now=False, running_now=False) == "waiting"
    assert job_state("RUNNING", queued_now=True, running_now=False) == "waiting"
    assert job_state("RUNNING", queued_now=True, running_now=True) == "running"  # replica 1 queued behind 0
    assert job_state("RUNNING", queued_now=False, running_now=False) == "running"  # the driver between stages
    assert job_state("SUCCEEDED", queued_now=False, running_now=False) == "SUCCEEDED"
