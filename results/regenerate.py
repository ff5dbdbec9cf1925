"""Regenerate every results file the chapters read, with one command; stopped, the same command resumes.

The command `python results/regenerate.py` as the book types it. The code, and how to run it:
experiments/regenerate.py.
"""
from experiments.regenerate import main

if __name__ == "__main__":
    raise SystemExit(main())
