"""The side-by-side benchmarks (one bench_*.py module per `python benchmarks/bench_*.py` command, each appending one
JSON line to a results file), what every one records beside its numbers (benchutil), and the pages that quote them:
the tables of book/benchmarks.md, a notebook whose cells display them (report; `python benchmarks/report.py --write`
re-executes it), and the numbers its prose glues and the other pages' prose marks (page_numbers), both reading the
results files through results_lines."""
