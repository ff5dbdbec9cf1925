"""The "Findings at small scale" tables of the book's page book/findings.md and of the README, computed from the
results files (never typed by hand).

    python results/findings.py            # print the tables
    python results/findings.py --write    # replace the tables between the markers of book/findings.md and README.md

The rows are agentrl_lib.findings.verdict_table's (the same rows the chapters end with): the finding, the paper's
number, ours on held-out success and on the learning-curve area (mean over seeds, n, the difference and its 95% t
interval, paired by seed where the cells share seeds), the verdict of each (agentrl_lib.findings.VERDICTS: agrees,
disagrees, cannot tell at this scale with the seeds +-15 points would need, a floor, near a floor, cannot tell yet)
and why ours may differ; above the table, the lessons (agentrl_lib.findings.lessons), every number computed.
tests/test_findings.py fails when a page's table differs from what this prints (re-run with --write after new results
land); book/build.py also refreshes the book's in the book it builds. This script adds the findings design's tables
(design_table: the search for the RL start, the pilot, the seeds rule) and what each sweep cost (cost_table).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from agentrl_lib import findings as verdicts
from agentrl_lib import records as _records
from experiments import ROOT  # the checkout: experiments.checkout_root

PAGE = ROOT / "book" / "findings.md"
README = ROOT / "README.md"
START, END = "<!-- findings:start -->", "<!-- findings:end -->"
DESIGN_START, DESIGN_END = "<!-- design:start -->", "<!-- design:end -->"
COST_START, COST_END = "<!-- cost:start -->", "<!-- cost:end -->"
LESSONS_START, LESSONS_END = "<!-- lessons:start -->", "<!-- lessons:end -->"
BALANCED_START, BALANCED_END = "<!-- balanced:start -->", "<!-- balanced:end -->"
SWEEPS = ("algo_reward", "sft_rl_split", "exploration", "complexity", "stability", "swe")
REGENERATE = verdicts.REGENERATE


def load_results(name_or_path) -> list[dict]:
    """A results file through the library's loader (records.load_results: a torn last line ignored with a warning,
    another damaged line refused naming the file and line), each run once (records.unique_records: a repeated
    record is counted once, with a note on stderr)."""
    return _records.unique_records(_records.load_results(name_or_path), str(name_or_path))


def _json(path: Path):
    """A JSON file of results/ (a choice, an SFT round); one that is cut short or not JSON raises
    records.ResultsFileError naming it."""
    import json

    try:
        return json.loads(path.read_text())
    except (ValueError, RecursionError) as e:
        raise _records.ResultsFileError(f"{path} is not valid JSON ({str(e)[:80]}); restore it from git") from None


def _all_results() -> dict[str, list[dict]]:
    """{name: records} of every results file the findings read (load_results)."""
    return {name: load_results(name) for name in verdicts.RESULTS_FILES}


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def findings_table(link: str = "../notebooks/", why: bool = True, results: dict | None = None) -> str:
    """The Markdown table (finding · paper · ours · verdict · why it may differ · chapter) of every finding
    (agentrl_lib.findings.verdict_table, the chapters' closing tables row for row), then one line on the runs it
    rests on. `link`: the path from the page to notebooks/ ("notebooks/" from the README); why=False: without the
    why column (the README's)."""
    results = results if results is not None else _all_results()
    runs = [r for name in SWEEPS for r in results[name]]
    devices = sorted({(r.get("machine") or {}).get("gpu") or r.get("device") for r in runs if r.get("device")})
    secs = sum(r.get("train_seconds") or 0 for r in runs)
    counts = " + ".join(str(len(results[n])) for n in SWEEPS)
    return "\n".join([verdicts.verdict_table(results=results, link=link, why=why), "",
                      f"From {counts} runs (algo × reward, SFT:RL split, exploration budget, complexity, bandit "
                      f"stability, SWE reward) on {', '.join(devices) or 'no device yet'}; {secs / 60:.0f} min of "
                      "training in total (Σ train_seconds). The verdict column judges held-out success (the papers' "
                      "metric); the learning-curve area has its own verdict beside it. Intervals: 95% t intervals "
                      "of the per-seed differences where the cells share seeds (the same start and games), Welch's "
                      "otherwise; the base-model row's is a bootstrap over games (agentrl_lib.findings)."])


def _where(record: dict) -> str:
    """The machine of a record: its GPU, else its CPU's name, else the device and the core count."""
    m = record.get("machine") or {}
    return m.get("gpu") or m.get("cpu") or f"{record.get('device')} ({m.get('cpu_count', '?')} cores)"


def cost_table() -> str:
    """The Markdown table of what each sweep in results/ cost, from its records: runs, where they ran (`_where`),
    the median wall time of a run in minutes over the runs that were not resumed (`wall_seconds`: training and
    evaluation), and the sum of `wall_seconds` in hours (a resumed run counts from its resumption only, so the sum
    is a lower bound). A sweep with no records in results/ says so."""
    rows = ["| sweep | runs | where | median wall time a run | wall time in all |", "|:--|--:|:--|--:|--:|"]
    for name in SWEEPS:
        records = load_results(name)
        if not records:
            rows.append(f"| {name} | 0 | not in results/ yet | | |")
            continue
        where = sorted({_where(r) for r in records})
        fresh = [r["wall_seconds"] for r in records if r.get("wall_seconds") and not r.get("resumed")]
        median = f"{statistics.median(fresh) / 60:.0f} min" if fresh else "n/a"
        total = sum(r.get("wall_seconds") or 0 for r in records) / 3600
        rows.append(f"| {name} | {len(records)} | {', '.join(where)} | {median} | {total:.1f} h |")
    return "\n".join(rows)


def design_table() -> str:
    """The findings design's search for the RL start, from the SFT rounds' files (results/incoming/sft_round*.json,
    then results/ once the sweep moves up): learning rate -> validation success and invalid-command rate, in the
    order tried, with the sampled numbers of the `behaviour` part when sft_behaviour.json exists; then the choice
    (sft_choice.json with chosen_lr), the pilot's runs so far (pilot_rows) and its
    number of seeds (seeds_choice.json) when they exist."""

    folders = [ROOT / "results" / "incoming", ROOT / "results"]
    rounds = sorted({p.name: p for d in reversed(folders) for p in d.glob("sft_round*.json")}.items())
    success, invalid, tried = {}, {}, {}
    for name, path in rounds:
        r = _json(path)
        for cand, v in r["validation_success"].items():
            success[cand], tried[cand] = v, name.removeprefix("sft_round").removesuffix(".json")
        invalid.update(r.get("invalid_rate", {}))
    if not success:
        return "No SFT round is recorded yet (`python results/regenerate.py pilot`)."
    behaviour = next((_json(p) for d in folders if (p := d / "sft_behaviour.json").exists()), None)
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
        if choice.exists() and "chosen_lr" in (c := _json(choice)):
            if (first := d / "sft_choice_greedy.json").exists():  # the start chosen on greedy success, then replaced
                g = _json(first)
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
            c = _json(seeds)
            half = c["half_width_by_n"][str(c["n_seeds"])]
            lines.append(f"\nPilot: pooled seed-to-seed sd {100 * c['pooled_sd']:.1f} points -> {c['n_seeds']} seeds "
                         f"(95% half-width of a two-cell difference {100 * half:.0f} points; rule: {c['rule']})"
                         + ("." if c["met"] else f": **not met** — the rule's largest affordable number of seeds "
                            f"leaves differences smaller than about {100 * half:.0f} points unresolved at this scale."))
            break
    return "\n".join(lines)


def balanced_status() -> str:
    """Where the balanced sweep stands, from its files (results/, else results/incoming/ while it runs): the SFT
    candidates' sampled validation success and the chosen start (sft_choice_balanced.json), the pilot's seeds rule
    (seeds_choice_balanced.json) and the runs recorded so far (algo_reward_balanced.jsonl)."""

    def find(name: str) -> Path | None:
        return next((p for d in (ROOT / "results", ROOT / "results" / "incoming") if (p := d / name).exists()), None)

    lines = []
    choice = find("sft_choice_balanced.json")
    if choice is None:
        return "The RL start is not chosen yet (`python results/regenerate.py balanced` trains the candidates first)."
    c = _json(choice)
    lines += ["| walkthroughs @ learning rate | sampled validation success | invalid commands |", "|:--|--:|--:|"]
    for cand, v in sorted(c["sampled_success"].items(), key=lambda kv: float(kv[0].split("@")[1])):
        lines.append(f"| {cand} | {_pct(v)} | {_pct(c['sampled_invalid'][cand])} |")
    lines.append(f"\nChosen: {c['chosen_demos']}@{c['chosen_lr']:g} (rule: {c['rule']}).")
    seeds = find("seeds_choice_balanced.json")
    if seeds is not None:
        s = _json(seeds)
        half = s["half_width_by_n"][str(s["n_seeds"])]
        held = s["heldout"]
        lines.append(f"\nPilot (every cell × seeds {', '.join(map(str, s['pilot_seeds']))}): paired-difference sd "
                     f"{100 * s['paired_diff_sd']:.1f} points of the learning-curve area, "
                     f"{100 * held['paired_diff_sd']:.1f} of held-out success → {s['n_seeds']} seeds (half-width "
                     f"of a paired difference of the area {100 * half:.0f} points"
                     + ("" if s["met"] else ": **the ±15 points are not met**") + ").")
        if s.get("budget"):
            b = s["budget"]
            lines.append(f"\nBudget: a pilot run took a median {b['median_run_cpu_hours']:g} CPU hours, so every cell "
                         f"at {s['n_seeds']} seeds would take {b['all_cells_cpu_hours']:g} CPU hours; past the pilot "
                         f"only {', '.join(b['later_cells'])} run ({b['later_runs']} runs, "
                         f"{b['planned_cpu_hours']:g} CPU hours in all with the pilot's {b['pilot_cpu_hours']:g}).")
    runs = find("algo_reward_balanced.jsonl")
    recs = load_results(runs) if runs else []
    if recs:
        by_seed = {}
        for r in recs:
            by_seed[r["seed"]] = by_seed.get(r["seed"], 0) + 1
        seeds = ", ".join(f"{k}: {v}" for k, v in sorted(by_seed.items()))
        lines.append(f"\nRecorded: {len(recs)} runs (by seed: {seeds}), in `{runs.relative_to(ROOT)}`.")
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
    from experiments.regenerate import design_settings as settings

    return settings()


def pilot_rows(path: Path, init: str, settings: dict | None = None) -> list[str]:
    """The pilot's runs so far (regenerate.PILOT's cells and seeds, started from `init`, with these values of
    regenerate.DESIGN_FIELDS when `settings` is given, in the results file `path`): one table row per run with its
    held-out success, mean turns and invalid-command rate; [] before the first."""
    from experiments.regenerate import PILOT, in_design

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


def main() -> None:
    """The command line; a damaged results file (records.ResultsFileError, naming the file and line) or a page
    without its markers (ValueError naming the page) ends it with one line `findings.py: error: ...`, exit status 2,
    and with --write no page is written unless every marker of both pages is found."""
    try:
        _main()
    except ValueError as e:  # records.ResultsFileError, a page's missing markers (with_block)
        print(f"findings.py: error: {' '.join(str(e).split())}", file=sys.stderr)
        raise SystemExit(2) from None


def _main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--write", action="store_true", help="replace the tables of book/findings.md and README.md")
    a = p.parse_args()
    results = _all_results()
    table, design, lead = findings_table(results=results), design_table(), verdicts.lessons(results)
    if not a.write:
        print(lead + "\n\n" + table + "\n\n" + design + "\n\n" + cost_table())
        return
    page = with_block(with_block(PAGE.read_text(), table), design, DESIGN_START, DESIGN_END)
    page = with_block(with_block(page, cost_table(), COST_START, COST_END), lead, LESSONS_START, LESSONS_END)
    page = with_block(page, balanced_status(), BALANCED_START, BALANCED_END)
    readme = with_block(README.read_text(), findings_table(link="notebooks/", results=results), page=README)
    readme = with_block(readme, lead, LESSONS_START, LESSONS_END, page=README)
    PAGE.write_text(page)  # both pages checked (every marker found) before either is written
    README.write_text(readme)
    print(f"{PAGE.relative_to(ROOT)}: lessons, findings, design and cost tables updated; "
          f"{README.relative_to(ROOT)}: lessons and findings table")


def block(text: str, start: str = START, end: str = END, page: Path = PAGE) -> str:
    """The text between the markers `start` and `end` of a page's text, stripped (by default the findings table;
    DESIGN_* and COST_* mark the design and cost tables); ValueError naming `page` when they are missing."""
    if start not in text or end not in text:
        raise ValueError(f"{page.name} lacks the markers {start} / {end}")
    return text.split(start, 1)[1].split(end, 1)[0].strip()


def with_block(text: str, new: str, start: str = START, end: str = END, page: Path = PAGE) -> str:
    """`text` (of `page`) with `new` between the markers `start` and `end` (by default the findings table's);
    ValueError naming `page` when they are missing."""
    block(text, start, end, page)  # the markers exist
    head, rest = text.split(start, 1)
    return head + start + "\n" + new + "\n" + end + rest.split(end, 1)[1]


if __name__ == "__main__":
    main()
