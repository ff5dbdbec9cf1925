"""Smoke-run the two side-by-side benchmarks (benchmarks/bench_rl_step_vs_trl.py, benchmarks/bench_rollout.py) on a
tiny random-weight model and real cooking games, as scripts in a subprocess: they finish, and the JSON line each
writes has its ratio fields and positive numbers. Timings are never asserted."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY_WORKLOAD = ["--episodes", "4", "--group-size", "2", "--max-turns", "2", "--new-tokens", "4", "--repeats", "1",
                 "--threads", "1"]


def run_script(name: str, args: list[str], out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_WAIT_POLICY": "PASSIVE"}  # no busy-waiting threads beside the other tests' processes
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / name), *args, "--out", str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = out.read_text().splitlines()
    assert len(lines) == 1
    return json.loads(lines[0])


def positive(*xs) -> bool:
    return all(isinstance(x, (int, float)) and x > 0 for x in xs)


def test_bench_rl_step_vs_trl_tiny(tmp_path, tiny_model_dir, cooking_games):
    res = run_script("bench_rl_step_vs_trl.py", ["--games", str(cooking_games.root), "--model", tiny_model_dir,
                                                 *TINY_WORKLOAD, "--minibatch", "2", "--warmup", "0"],
                     tmp_path / "rl.jsonl")
    assert positive(res["ratio_total"], res["ratio_rollout"], res["ratio_update"], res["ratio_peak_rss"])
    for side in ("ours", "trl"):
        r = res[side]
        assert len(r["steps"]) == 1 and positive(r["median_total"], r["median_rollout"], r["peak_rss_gib"])
        assert r["steps"][0]["generated_tokens"] > 0
    assert res["versions"]["trl"] and res["commit"] and res["repeats"] == 1


def test_bench_rollout_tiny(tmp_path, tiny_model_dir, cooking_games):
    res = run_script("bench_rollout.py", ["--games", str(cooking_games.root), "--model", tiny_model_dir,
                                          *TINY_WORKLOAD], tmp_path / "rollout.jsonl")
    assert positive(res["speedup_vs_sequential"], res["speedup_vs_reencode"], res["gen_speedup_vs_sequential"],
                    res["gen_speedup_vs_reencode"], res["peak_rss_gib"])
    for m in ("batched", "sequential", "reencode"):
        assert len(res[m]["runs"]) == 1 and positive(res[m]["median_tokens_per_s"], res[m]["runs"][0]["tokens"])
    # the three methods played the same episodes: as many episodes, each for at least one turn
    assert all(res[m]["runs"][0]["turns"] >= res["episodes"] for m in ("batched", "sequential", "reencode"))
