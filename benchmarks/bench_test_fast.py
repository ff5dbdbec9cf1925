"""What the quick test run costs: `make test-fast` (the tests not marked trains, subprocess or slow) in this checkout,
repeated, against its budget (tests/conftest.py QUICK_RUN_BUDGET_S).

The command `python benchmarks/bench_test_fast.py` as the book types it. The code, and how to run it:
experiments/benchmarks/bench_test_fast.py.
"""
from experiments.benchmarks.bench_test_fast import main

if __name__ == "__main__":
    raise SystemExit(main())
