"""pytest plugin loaded inside the swe sandbox (`-p agentrl_swe_report`): prints each test's outcome as one JSON line
after a marker and the run's nonce when the session ends, so the host reads outcomes by test node id without parsing
pytest's text.

The nonce (a random token the host makes per test run, swe_tasks.run_tests) arrives on standard input and is read once,
when pytest imports this plugin, before any test module is imported: a module under test that prints the marker
cannot know it, so its line is told apart from this one (run_tests accepts exactly one marker carrying the nonce).
What it does not stop: code under test runs in pytest's own process, so deliberate introspection of this module could
still find the token; the grader's other guards (book/when_things_go_wrong.md) are about what an agent's edit can
reach without that.

Introduced for issue 26 (the `swe` family); bound read-only into the sandbox by agentrl_lib.envs.swe_tasks.
"""
import json
import os

MARKER = "@@AGENTRL-SWE-RESULTS@@"
_outcomes = {}


def _read_nonce() -> str:
    try:
        if os.isatty(0):
            return ""
        return os.read(0, 128).decode("ascii", "replace").strip()
    except OSError:
        return ""


_nonce = _read_nonce()


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":  # a setup/teardown failure fails the test
        if _outcomes.get(report.nodeid) in (None, "passed"):
            _outcomes[report.nodeid] = "passed" if report.outcome == "passed" else report.outcome


def pytest_sessionfinish(session, exitstatus):
    os.write(1, ("\n" + MARKER + _nonce + " " + json.dumps(_outcomes) + "\n").encode())
