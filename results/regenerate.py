"""Regenerate every results file the chapters read, with one command; stopped, the same command resumes.

The command `python results/regenerate.py` as the book types it. The code, and how to run it:
experiments/regenerate.py; what each part runs: its plan, configs/sweeps/PART.yaml.
"""
import sys

from experiments.sweep_plans import PlanError

try:
    from experiments.regenerate import main  # reads and checks the plans
except PlanError as e:  # a plan file missing or malformed: one line naming it and the key, as main() says of results
    print(f"regenerate.py: error: {e}", file=sys.stderr)
    raise SystemExit(2) from None

if __name__ == "__main__":
    raise SystemExit(main())
