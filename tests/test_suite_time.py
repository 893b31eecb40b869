"""benchmarks.code.suite_time's reading of a run: pytest's closing line, and the table that says
whether a run met its target (a failed suite never meets it, however fast)."""

from benchmarks.code.suite_time import section, summary_line


def test_the_closing_line_is_pytests_last():
    output = "..F..\n== 1 failed in 3s (flaky) ==\nwarnings\n=== 900 passed, 2 skipped in 1093.51s (0:18:13) ===\n"
    assert summary_line(output) == "900 passed, 2 skipped in 1093.51s (0:18:13)"
    assert summary_line("collected nothing\n") == "no summary line"


def run(cpus, seconds, rc=0, target=None):
    return {"cpus": cpus, "cores": 2, "loop_s": 1.45, "pytest_s": seconds, "summary": "900 passed",
            "rc": rc, "date": "2026-12-07", "target_s": target}  # fmt: skip


def test_a_run_meets_its_target_only_in_time_and_green():
    table = section([run(None, 1500, target=1500), run(1.0, 2701, target=2700)])
    assert "| 2026-12-07 | all | 1.45 | 25.0 | ≤ 25 (met) | 900 passed |" in table
    assert "| 1 of 2 (CFS quota) | 1.45 | 45.0 | ≤ 45 (MISSED) |" in table
    assert "(MISSED)" in section([run(1.0, 60, rc=1, target=2700)])
    assert "(met)" not in section([run(0.5, 60)])  # no target for that quota: nothing to meet
