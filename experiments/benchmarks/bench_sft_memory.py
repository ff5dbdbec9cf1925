"""Peak memory and time of the SFT warm-up with and without micro-batches (`agentrl sft --micro-batch-size`): the
same gradient steps (TRL's gradient accumulation; the loss is the mean over each step's assistant tokens), passed
`micro` walkthroughs at a time.

    python benchmarks/bench_sft_memory.py --games games/swe-train [--model embedded] [--demos 8] [--batch-size 4]
                                          [--micro 4,1] [--max-turns 5] [--out results/sft_memory.jsonl]

Each setting runs sft.sft in its own process (peak RSS is per process) on the walkthroughs of the first --demos
games, one epoch at the default learning rate, and reports its wall time, peak RSS and training losses: the losses
of two settings agree to float rounding (tests/test_sft.py checks the weights). Prints each setting's ratios to the
first and appends one JSON line with all of it to --out. Swe walkthroughs are long (~900 to ~1,600 tokens with the
embedded SmolLM2-135M): chapter 06's SFT at batch 4 is where the notebook's peak memory comes from.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time

ITSELF = [sys.executable, "-m", "experiments.benchmarks.bench_sft_memory"]
"""The command that runs this module again in a fresh process (one measurement per process)."""


def one_setting(model: str, games: str, demos: int, batch: int, micro: int, max_turns: int) -> dict:
    import torch

    from agentrl_lib.envs.base import load_game_set
    from agentrl_lib.sft import sft

    torch.set_num_threads(min(2, torch.get_num_threads()))
    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        s = sft(model, load_game_set(games).first(demos), out, batch_size=batch, micro_batch_size=micro,
                max_turns=max_turns, device="cpu", dtype="float32")
    return {"micro_batch_size": micro, "seconds": round(time.perf_counter() - t, 1),
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2,
            "train_loss": s["train_loss"], "examples": s["examples"], "tokens": s["tokens"],
            "threads": torch.get_num_threads()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--games", required=True, help="a game set with walkthroughs, e.g. games/swe-train")
    p.add_argument("--model", default="embedded")
    p.add_argument("--demos", type=int, default=8, help="walkthroughs of the first N games")
    p.add_argument("--batch-size", type=int, default=4, help="walkthroughs per gradient step")
    p.add_argument("--micro", default="4,1", help="comma-separated micro-batch sizes (each divides --batch-size)")
    p.add_argument("--max-turns", type=int, default=5)
    p.add_argument("--machine", default="", help="how to name the machine in the results, e.g. '2-core shared CPU'")
    p.add_argument("--out", default="", help="append one JSON line (e.g. results/sft_memory.jsonl)")
    p.add_argument("--_one", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a._one:
        print(json.dumps(one_setting(a.model, a.games, a.demos, a.batch_size, a._one, a.max_turns)))
        return
    micros = [int(x) for x in a.micro.split(",")]
    if any(m < 1 or a.batch_size % m for m in micros):
        raise SystemExit(f"--micro: each size must be >= 1 and divide --batch-size {a.batch_size} (got {a.micro})")
    settings = []
    for m in micros:
        out = subprocess.run([*ITSELF, "--games", a.games, "--model", a.model, "--demos",
                              str(a.demos), "--batch-size", str(a.batch_size), "--max-turns", str(a.max_turns),
                              "--_one", str(m)], capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(f"the setting --micro {m} failed: {out.stderr.strip().splitlines()[-1]}")
        settings.append(r := json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"micro-batch {m}: {r['seconds']:6.1f} s, peak RSS {r['peak_rss_gb']:5.2f} GB, loss "
              f"{r['train_loss'][0]:.4f} → {r['train_loss'][-1]:.4f} ({r['examples']} walkthroughs, {r['tokens']} "
              "tokens)", flush=True)
    first = settings[0]
    for r in settings[1:]:
        r["time_ratio"] = round(r["seconds"] / first["seconds"], 3)
        r["memory_ratio"] = round(r["peak_rss_gb"] / first["peak_rss_gb"], 3)
        r["max_loss_diff"] = max(abs(x - y) for x, y in zip(r["train_loss"], first["train_loss"]))
        print(f"micro-batch {r['micro_batch_size']} / {first['micro_batch_size']}: time x{r['time_ratio']:.2f}, "
              f"peak memory x{r['memory_ratio']:.2f}, losses differ by {r['max_loss_diff']:.1e} at most")
    if a.out:
        from experiments.benchmarks.benchutil import load1, machine_info, write_result

        write_result(a.out, {"bench": "sft_memory", "model": a.model, "games": a.games, "demos": a.demos,
                             "batch_size": a.batch_size, "settings": settings, "load_after": load1(),
                             **machine_info(a.machine)}, a, seed=0)


if __name__ == "__main__":
    main()
