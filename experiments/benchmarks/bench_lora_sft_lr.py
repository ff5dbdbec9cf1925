"""The LoRA demo's SFT learning rate, chosen on training data only: the demo's SFT stage run with full fine-tuning
at its default learning rate and with a rank-r LoRA adapter at several learning rates, each SFT model then scored by
its mean negative log-likelihood per action token over every training walkthrough (one no-grad pass). The LoRA rate
whose fit is nearest full fine-tuning's is the one `agentrl demo --lora-rank` should take (book/demo.md): the RL
stage then starts from a comparably fitted model. No held-out game is played, so nothing is tuned on them.

    python benchmarks/bench_lora_sft_lr.py [--model embedded] [--games 16] [--games-dir DIR] [--rank 16]
        [--lrs 5e-4,1e-3,1.5e-3,2e-3,3e-3] [--full-lr 5e-5] [--seed 0] [--machine TEXT]
        [--out results/lora_sft_lr.jsonl]

The games are the demo's training games (`--games` tw-cooking games of seed `--seed`, agentrl_lib.demo's family and
cache folder) unless `--games-dir` names a game set. SFT as the demo's: agentrl_lib.sft.sft, 1 epoch, batch 4, the
demo's turn limit. Why the last logged SFT loss is not the measure: it is one batch of 4 walkthroughs, measured before
that batch's update, and it moves by 2× between neighbouring learning rates.
"""
from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

from experiments.benchmarks.benchutil import machine_info, peak_rss_gib, write_result


def walkthrough_nll(policy_dir: str | Path, games) -> tuple[float, int]:
    """Mean negative log-likelihood (nats per token) of the SFT model in `policy_dir` on the action tokens (and end
    tokens) of every walkthrough of `games` (sft.expert_examples, the demo's turn limit), with transformers' own
    shifted cross-entropy (labels -100 off the actions). Returns (nll, number of action tokens)."""
    import torch

    from agentrl_lib.demo import DemoBudget
    from agentrl_lib.models import load_policy
    from agentrl_lib.prompts import ChatFormat
    from agentrl_lib.sft import expert_examples

    pol, tok = load_policy(str(policy_dir))
    pol.eval()
    total, n = 0.0, 0
    with torch.no_grad():
        for e in expert_examples(games, ChatFormat(tok), max_turns=DemoBudget().max_turns):
            ids = torch.tensor([e["input_ids"]])
            labels = ids.masked_fill(torch.tensor([e["assistant_masks"]]) == 0, -100)
            k = int((labels[0, 1:] != -100).sum())  # the model predicts token t from tokens < t
            total += pol(input_ids=ids, labels=labels).loss.item() * k
            n += k
    return total / n, n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="embedded")
    p.add_argument("--games", type=int, default=16, help="the demo's training games (DemoBudget.train_games)")
    p.add_argument("--games-dir", default="", help="a game set to use instead of the demo's training games")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--lrs", default="5e-4,1e-3,1.5e-3,2e-3,3e-3", help="LoRA SFT learning rates, comma-separated")
    p.add_argument("--full-lr", type=float, default=5e-5, help="full fine-tuning's (DemoBudget.sft_lr)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--machine", default="2-core shared CPU")
    p.add_argument("--out", default="results/lora_sft_lr.jsonl")
    a = p.parse_args()

    import torch

    from agentrl_lib.demo import GAME_FAMILY, DemoBudget
    from agentrl_lib.envs.base import load_game_set
    from agentrl_lib.envs.textworld import make_textworld_games
    from agentrl_lib.paths import cache_root
    from agentrl_lib.sft import sft

    torch.manual_seed(a.seed)
    games = load_game_set(a.games_dir) if a.games_dir else make_textworld_games(
        cache_root() / "games" / f"cooking-train-s{a.seed}-n{a.games}", a.games, seed=a.seed, progress=False,
        **GAME_FAMILY)
    settings = [("full", 0, a.full_lr)] + [("lora", a.rank, float(x)) for x in a.lrs.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind, rank, lr in settings:
            t = time.perf_counter()
            s = sft(a.model, games, f"{tmp}/{kind}-{lr:g}", epochs=DemoBudget().sft_epochs, lr=lr, seed=a.seed,
                    max_turns=DemoBudget().max_turns, lora_rank=rank)
            nll, n = walkthrough_nll(f"{tmp}/{kind}-{lr:g}/policy", games)
            rows.append({"kind": kind, "rank": rank, "lr": lr, "nll": nll, "action_tokens": n,
                         "last_logged_loss": s["train_loss"][-1], "sft_seconds": s["seconds"],
                         "seconds": time.perf_counter() - t})
            print(f"{kind:4} r{rank:<3} lr {lr:<8g} NLL/action token {nll:.4f} (last logged loss "
                  f"{s['train_loss'][-1]:.3f}) in {rows[-1]['seconds']:.0f} s", flush=True)
    full = rows[0]["nll"]
    lora = [r for r in rows if r["kind"] == "lora"]
    chosen = min(lora, key=lambda r: abs(math.log(r["nll"] / full)))
    print(f"nearest full fine-tuning's fit ({full:.4f}): LoRA lr {chosen['lr']:g} ({chosen['nll']:.4f}), "
          f"{chosen['lr'] / a.full_lr:.0f}x full fine-tuning's")
    write_result(a.out, {**machine_info(a.machine), "games": str(games.root), "walkthroughs": len(games),
                         "settings": rows, "chosen_lr": chosen["lr"], "peak_rss_gib": peak_rss_gib()},
                 args=a, seed=a.seed)


if __name__ == "__main__":
    main()
