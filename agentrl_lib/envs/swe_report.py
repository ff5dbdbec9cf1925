"""pytest plugin loaded inside the swe sandbox (`-p agentrl_swe_report`): prints each test's outcome as one JSON line
after a marker when the session ends, so the host reads outcomes by test node id without parsing pytest's text.

Introduced for issue 26 (the `swe` family); bound read-only into the sandbox by agentrl_lib.envs.swe_tasks.
"""
import json
import os

MARKER = "@@AGENTRL-SWE-RESULTS@@"
_outcomes = {}


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":  # a setup/teardown failure fails the test
        if _outcomes.get(report.nodeid) in (None, "passed"):
            _outcomes[report.nodeid] = "passed" if report.outcome == "passed" else report.outcome


def pytest_sessionfinish(session, exitstatus):
    os.write(1, ("\n" + MARKER + json.dumps(_outcomes) + "\n").encode())
