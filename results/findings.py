"""The "Findings at small scale" table of the book's page book/findings.md, computed from the results files (never
typed by hand).

    python results/findings.py            # print the table
    python results/findings.py --write    # replace the tables between book/findings.md's markers (findings, design)

tests/test_findings.py fails when the page's table differs from what this prints (re-run with --write after new
results land); book/build.py also refreshes it in the book it builds. Each row: the finding, the paper's number, ours
(mean over seeds, n, 95% bootstrap interval of the difference over the seeds both cells have from
agentrl_lib.report.difference), and the verdict: "agrees" / "disagrees" when the interval excludes 0, "no difference at
this scale" when it contains 0, "cannot tell yet" when a cell has fewer than 2 seeds. Results files are read with
agentrl_lib.records.load_results, a collapse is diagnostics.collapse_step's.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "results"))  # regenerate.py (the pilot's cells), imported as the script does

from agentrl_lib.diagnostics import collapse_step  # noqa: E402
from agentrl_lib.records import load_results  # noqa: E402
from agentrl_lib.report import cell, difference  # noqa: E402

PAGE = ROOT / "book" / "findings.md"
START, END = "<!-- findings:start -->", "<!-- findings:end -->"
DESIGN_START, DESIGN_END = "<!-- design:start -->", "<!-- design:end -->"
REGENERATE = "python results/regenerate.py"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _difference(records, compare, a, b, where: dict, expect_sign: int) -> tuple[str, str]:
    """(ours, verdict) for mean(a) − mean(b) of held-out success between two values of `compare` within `where`,
    over the seeds both cells have (report.difference; the seeds left out are named).
    expect_sign: +1 if the paper found a > b, -1 if a < b, 0 if it found no difference."""
    if not any(all(r["cell"].get(k) == v for k, v in where.items()) for r in records):
        return "not run yet", f"cannot tell yet (`{REGENERATE}`)"
    ca, cb = (cell(records, **where, **{compare: v}) for v in (a, b))
    ours = "; ".join(f"{v} {_pct(c.mean)} (n={c.n})" if c.n else f"{v} not run" for v, c in ((a, ca), (b, cb)))
    d = difference(ca, cb)
    if d.ci is None:
        return ours, ("cannot tell yet (fewer than 2 seeds in a cell)" if min(ca.n, cb.n) < 2 else
                      "cannot tell yet (fewer than 2 seeds common to both cells)")
    diff, (lo, hi) = d.diff, d.ci
    ours += f"; Δ {100 * diff:+.0f} pts [{100 * lo:+.0f}, {100 * hi:+.0f}]"
    if d.dropped_a or d.dropped_b:
        left = [f"{v} seed {s}" for v, seeds in ((a, d.dropped_a), (b, d.dropped_b)) for s in seeds]
        ours += f" over the {d.n} seeds both have (left out: {', '.join(left)})"
    if lo <= 0 <= hi:
        return ours, "no difference at this scale" + (" (agrees)" if expect_sign == 0 else "")
    return ours, "agrees" if (diff > 0) == (expect_sign > 0) and expect_sign != 0 else "disagrees"


def _collapse(records) -> tuple[str, str]:
    """RAGEN's Echo Trap signature in the training curves, by the library's one definition: the run raised the
    collapse detector's `reward_std_collapse` alert (diagnostics.collapse_step: the within-group return std at
    most 0.05 for 5 consecutive steps while training success is below 0.9; records written before the detector
    existed are replayed through it)."""
    if not records:
        return "not run yet", f"cannot tell yet (`{REGENERATE}`)"
    fired = sorted(s for s in map(collapse_step, records) if s is not None)
    where = f" (steps {fired[0]}-{fired[-1]})" if fired else ""
    return (f"{len(fired)} of {len(records)} runs raised the reward-std collapse alert{where}: group return std "
            "<= 0.05 for 5 steps before success converged", "agrees (a collapse is seen)" if fired else
            "not seen at this scale")


def findings_table() -> str:
    """The Markdown table (finding · paper · ours · verdict), from results/*.jsonl."""
    main = load_results("algo_reward")
    split = load_results("sft_rl_split")
    complexity = load_results("complexity")
    stability = load_results("stability")
    rows = []
    for finding, paper, args in [
        ("PPO (critic, GAE) beats GRPO, dense reward", "PPO 88% vs GRPO ≈ base (1.5B, cooking)",
         ("algo", "ppo", "grpo", {"reward.kind": "dense"}, 1)),
        ("PPO beats RLOO, dense reward", "PPO 88% vs RLOO 51%", ("algo", "ppo", "rloo", {"reward.kind": "dense"}, 1)),
        ("Dense turn rewards help PPO", "PPO 41% sparse → 58% dense (cooking)",
         ("reward.kind", "dense", "sparse", {"algo": "ppo"}, 1)),
        ("Dense rewards do not help RLOO", "RLOO flat", ("reward.kind", "dense", "sparse", {"algo": "rloo"}, 0)),
    ]:
        compare, a, b, where, sign = args
        ours, verdict = _difference(main, compare, a, b, where, sign) if main else ("not run yet", "cannot tell yet")
        rows.append((finding, paper, ours, verdict, "03_policy" if compare == "algo" else "02_reward"))
    ours, verdict = _collapse(main)
    rows.append(("Echo Trap: reward spread collapses", "RAGEN: group reward std falls before reward, collapse",
                 ours, verdict, "03_policy"))
    for finding, paper, args in [
        ("Bandit: GRPO falls behind PPO (critic)", "RAGEN: GRPO collapses earlier than PPO on Bandit and Sokoban",
         ("algo.advantage", "gae", "grpo", {"algo.keep_top_std": 1.0}, 1)),
        ("Bandit: StarPO-S filter (keep 25%) rescues GRPO", "RAGEN: keeping 50% removed collapse (FrozenLake)",
         ("algo.keep_top_std", 0.25, 1.0, {"algo.advantage": "grpo"}, 1)),
        ("Bandit: StarPO-S filter (keep 50%) rescues GRPO", "RAGEN: keeping 50% removed collapse (FrozenLake)",
         ("algo.keep_top_std", 0.5, 1.0, {"algo.advantage": "grpo"}, 1)),
    ]:
        compare, a, b, where, sign = args
        ours, verdict = (_difference(stability, compare, a, b, where, sign) if stability else
                         ("not run yet", f"cannot tell yet (`{REGENERATE} stability`)"))
        rows.append((finding, paper, ours, verdict, "05_stability"))
    long = load_results("stability_long")  # the 25-step GRPO run: the 10-step runs drift but are too short to close
    ours, verdict = (_collapse(stability + long) if stability else
                     ("not run yet", f"cannot tell yet (`{REGENERATE} stability`)"))
    rows.append(("Echo Trap on the bandit", "RAGEN: group reward std falls before reward, collapse", ours, verdict,
                 "05_stability"))
    rows.append(("SFT then RL under a fixed budget", "60 demos + 400 episodes → 85% in-domain, 59% harder games",
                 f"{len(split)} runs" if split else "not run yet",
                 "see chapter" if split else f"cannot tell yet (`{REGENERATE} split`)", "04_sft_then_rl"))
    rows.append(("Success falls as the world grows", "PPO 88% at w2-o3-q4 vs 51% at w8-o12-q4",
                 f"{len(complexity)} runs" if complexity else "not run yet",
                 "see chapter" if complexity else f"cannot tell yet (`{REGENERATE} complexity`)", "01_environment"))
    swe = load_results("swe")
    ours, verdict = (_difference(swe, "env.swe_reward", "pass_ratio", "resolved", {}, 1) if swe else
                     ("not run yet", f"cannot tell yet (`{REGENERATE} swe`)"))
    rows.append(("SWE: the test-pass-ratio reward beats the binary one", "GRPO, Qwen3-8B: 22% resolved (pass ratio) vs "
                 "4.2% (binary)", ours, verdict, "06_swe"))
    lines = ["| finding | paper | ours (held-out success, mean over seeds) | verdict | chapter |",
             "|:--|:--|:--|:--|:--|"]
    lines += [f"| {f} | {p} | {o} | {v} | [{c}](../notebooks/{c}.ipynb) |" for f, p, o, v, c in rows]
    devices = sorted({(r.get("machine") or {}).get("gpu") or r.get("device")
                      for r in main + split + complexity + stability + swe if r.get("device")})
    secs = sum(r.get("train_seconds") or 0 for r in main + split + complexity + stability + swe)
    lines += ["", f"From {len(main)} + {len(split)} + {len(complexity)} + {len(stability)} + {len(swe)} runs (algo × "
              "reward, SFT:RL split, complexity, bandit stability, SWE reward) "
              f"on {', '.join(devices) or 'no device yet'}; {secs / 60:.0f} min of training in total "
              "(Σ train_seconds). "
              "Intervals: 95% percentile bootstrap over seeds (agentrl_lib.report)."]
    return "\n".join(lines)


def design_table() -> str:
    """The findings design's search for the RL start, from the SFT rounds' files (results/incoming/sft_round*.json,
    then results/ once the sweep moves up): learning rate -> validation success and invalid-command rate, in the
    order tried, with the sampled numbers of the `behaviour` part when sft_behaviour.json exists; then the choice
    (sft_choice.json with chosen_lr), the pilot's runs so far (pilot_rows) and its
    number of seeds (seeds_choice.json) when they exist."""
    import json

    folders = [ROOT / "results" / "incoming", ROOT / "results"]
    rounds = sorted({p.name: p for d in reversed(folders) for p in d.glob("sft_round*.json")}.items())
    success, invalid, tried = {}, {}, {}
    for name, path in rounds:
        r = json.loads(path.read_text())
        for cand, v in r["validation_success"].items():
            success[cand], tried[cand] = v, name.removeprefix("sft_round").removesuffix(".json")
        invalid.update(r.get("invalid_rate", {}))
    if not success:
        return "No SFT round is recorded yet (`python results/regenerate.py pilot`)."
    behaviour = next((json.loads(p.read_text()) for d in folders if (p := d / "sft_behaviour.json").exists()), None)
    head = "| round | walkthroughs @ learning rate | validation success | invalid commands |"
    lines = [head, "|:-:|:--|--:|--:|"]
    if behaviour:  # the same games sampled at the RL temperature, as the first rollouts play them
        t = f"{behaviour['temperature']:g}"
        lines = [head + f" sampled at T = {t}: success | invalid |", "|:-:|:--|--:|--:|--:|--:|"]
    for cand in sorted(success, key=lambda c: float(c.split("@")[1])):
        inv = f"{100 * invalid[cand]:.0f}%" if cand in invalid else "—"
        row = f"| {tried[cand]} | {cand} | {_pct(success[cand])} | {inv} |"
        if behaviour:
            b = behaviour["candidates"].get(cand)
            row += f" {_pct(b['sampled_success'])} | {100 * b['sampled_invalid']:.0f}% |" if b else " — | — |"
        lines.append(row)
    for d in folders:
        choice = d / "sft_choice.json"
        if choice.exists() and "chosen_lr" in (c := json.loads(choice.read_text())):
            if (first := d / "sft_choice_greedy.json").exists():  # the start chosen on greedy success, then replaced
                g = json.loads(first.read_text())
                lines.append(f"\nFirst chosen: {g['chosen_demos']}@{g['chosen_lr']:g} (rule: {g['rule']}).")
                lines += pilot_rows(d / "algo_reward_greedy_start.jsonl", g["chosen"])
            where = "inside" if c["inside_band"] else "outside"
            lines.append(f"\nChosen: {c['chosen_demos']}@{c['chosen_lr']:g} ({where} the band; rule: {c['rule']}).")
            if stopped := pilot_rows(d / "algo_reward_lr3e-05.jsonl", c["chosen"]):
                lines += [stopped[0].replace("The pilot's runs", "The pilot at RL lr 3e-5, stopped"), *stopped[1:]]
            lines += probe_rows([*load_results(d / "ppo_probe.jsonl"),  # the probe's own runs first: validation
                                 *load_results(d / "algo_reward_lr3e-05.jsonl")], c["chosen"])
            settings = design_settings()
            if rows := pilot_rows(d / "algo_reward.jsonl", c["chosen"], settings):
                chosen = ", ".join(f"{k} {v}" for k, v in settings.items())
                lines += [rows[0].replace("The pilot's runs", f"The pilot's runs at {chosen}"), *rows[1:]]
            break
    for d in folders:
        seeds = d / "seeds_choice.json"
        if seeds.exists():
            c = json.loads(seeds.read_text())
            half = c["half_width_by_n"][str(c["n_seeds"])]
            lines.append(f"\nPilot: pooled seed-to-seed sd {100 * c['pooled_sd']:.1f} points -> {c['n_seeds']} seeds "
                         f"(95% half-width of a two-cell difference {100 * half:.0f} points; rule: {c['rule']})"
                         + ("." if c["met"] else f": **not met** — the rule's largest affordable number of seeds "
                            f"leaves differences smaller than about {100 * half:.0f} points unresolved at this scale."))
            break
    return "\n".join(lines)


def probe_rows(records: list[dict], init: str) -> list[str]:
    """The evidence of the PPO settings (regenerate.PPO_PROBE): PPO dense runs from `init` at seed 0, one table row per
    (learning rate, whitened advantages) with the first record of each, in the order given: the approximate KL of
    the first update, the largest drop of training success between consecutive steps, the training success of each
    step (%, 16 episodes a step) and the final policy's success on the games it was evaluated on (validation for the
    probe's runs, held-out for a pilot record). [] when no record qualifies."""
    by_setting: dict[tuple[float, bool], dict] = {}
    for r in records:
        labels = {k: str(v) for k, v in r["cell"].items()}
        if (labels.get("algo") == "ppo" and labels.get("reward.kind") == "dense" and r["seed"] == 0
                and str(r["config"]["model"]["name"]).rstrip("/").endswith(init.rstrip("/"))):
            setting = (float(r["config"]["train"]["lr"]), bool(r["config"]["algo"].get("normalize_advantages", True)))
            by_setting.setdefault(setting, r)
    if not by_setting:
        return []
    lines = ["\nThe PPO settings (PPO, dense, seed 0: the same start and first rollouts; "
             f"`{REGENERATE} probe`):\n",
             "| RL lr | whitened advantages | first update's approx. KL | largest drop between steps | "
             "training success by step (%) | evaluated on | success |", "|--:|:-:|--:|--:|:--|:--|--:|"]
    for (lr, whiten), r in sorted(by_setting.items(), key=lambda kv: (-kv[0][0], not kv[0][1])):
        success = [s["success_rate"] for s in r["steps"]]
        drop = max((a - b for a, b in zip(success, success[1:])), default=0.0)
        games = Path(str(r["config"]["train"]["eval_games"])).name
        lines.append(f"| {lr:g} | {'yes' if whiten else 'no'} | {r['steps'][0]['approx_kl']:.3f} | "
                     f"{100 * drop:.0f} points | {' '.join(f'{100 * x:.0f}' for x in success)} | {games} | "
                     f"{_pct(r['eval']['success_rate'])} |")
    return lines


def design_settings() -> dict:
    from regenerate import design_settings as settings

    return settings()


def pilot_rows(path: Path, init: str, settings: dict | None = None) -> list[str]:
    """The pilot's runs so far (regenerate.PILOT's cells and seeds, started from `init`, with these values of
    regenerate.DESIGN_FIELDS when `settings` is given, in the results file `path`): one table row per run with its
    held-out success, mean turns and invalid-command rate; [] before the first."""
    from regenerate import PILOT, in_design

    want = [dict(c.split("=", 1) for c in cell) for cell in PILOT["cells"]]
    rows = []
    for r in load_results(path):
        labels = {k: str(v) for k, v in r["cell"].items()}
        if (labels in want and r["seed"] in PILOT["seeds"]
                and str(r["config"]["model"]["name"]).rstrip("/").endswith(init.rstrip("/"))
                and (settings is None or in_design(r, settings))):
            e = r["eval"]
            rows.append((want.index(labels), r["seed"], f"| {labels['algo'].upper()}, {labels['reward.kind']} | "
                         f"{r['seed']} | {_pct(e['success_rate'])} | {e['mean_turns']:.1f} | "
                         f"{100 * e['invalid_rate']:.0f}% |"))
    if not rows:
        return []
    n = len(PILOT["cells"]) * len(PILOT["seeds"])
    return [f"\nThe pilot's runs ({len(rows)} of {n}; held-out games, greedy):\n",
            "| cell | seed | held-out success | mean turns | invalid commands |", "|:--|:-:|--:|--:|--:|",
            *(row for *_, row in sorted(rows))]


def page_block(text: str) -> str:
    """The text between the findings markers of a page's text (stripped), or raise ValueError when they are
    missing."""
    if START not in text or END not in text:
        raise ValueError(f"{PAGE.relative_to(ROOT)} lacks the markers {START} / {END}")
    return text.split(START, 1)[1].split(END, 1)[0].strip()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--write", action="store_true", help="replace the table of book/findings.md")
    a = p.parse_args()
    table, design = findings_table(), design_table()
    if not a.write:
        print(table + "\n\n" + design)
        return
    PAGE.write_text(with_block(with_table(PAGE.read_text(), table), design, DESIGN_START, DESIGN_END))
    print(f"{PAGE.relative_to(ROOT)}: findings and design tables updated")


def with_table(text: str, table: str) -> str:
    """`text` with `table` between its findings markers."""
    page_block(text)  # the markers exist
    return with_block(text, table, START, END)


def with_block(text: str, block: str, start: str, end: str) -> str:
    """`text` with `block` between the markers `start` and `end`; ValueError when they are missing."""
    if start not in text or end not in text:
        raise ValueError(f"{PAGE.relative_to(ROOT)} lacks the markers {start} / {end}")
    head, rest = text.split(start, 1)
    return head + start + "\n" + block + "\n" + end + rest.split(end, 1)[1]


def design_block(text: str) -> str:
    """The text between the design markers of a page's text (stripped)."""
    if DESIGN_START not in text or DESIGN_END not in text:
        raise ValueError(f"{PAGE.relative_to(ROOT)} lacks the markers {DESIGN_START} / {DESIGN_END}")
    return text.split(DESIGN_START, 1)[1].split(DESIGN_END, 1)[0].strip()


if __name__ == "__main__":
    main()
