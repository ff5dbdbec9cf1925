"""The side-by-side benchmarks (one bench_*.py module per `python benchmarks/bench_*.py` command, each appending one
JSON line to a results file), what every one records beside its numbers (benchutil), and the pages that quote them:
the tables of book/benchmarks.md (report, `python benchmarks/report.py --write`) and the numbers the other pages'
prose marks (page_numbers), both reading the results files through results_lines."""
