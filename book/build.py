"""Build the workbook as a Jupyter Book (1.x) that works opened from disk, with no network and no kernel.

The command `python book/build.py` as the book types it. The code, and how to run it:
experiments/book_build.py.
"""
from experiments.book_build import main

if __name__ == "__main__":
    raise SystemExit(main())
