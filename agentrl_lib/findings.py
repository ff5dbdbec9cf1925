"""The two papers' findings set against this project's results files: one verdict row per finding.

The chapters close with `verdict_table(chapter)`, the book's findings page and the README show `verdict_table()`
(written by `python results/findings.py --write`), so a verdict is computed in one place and the three cannot
disagree. Every row reads results files only (records.load_results); nothing is typed.

A row: the finding, the paper's number, ours on two outcomes, each with its verdict, and why ours may differ.
- Held-out success (`eval.success_rate`: greedy, on held-out games; the papers' metric) decides the **verdict**
  column. The **learning-curve area** (`area`: mean training success over every step, 16 sampled episodes a step)
  has its own verdict beside it: its seed-to-seed spread is 2-4 times smaller, so it resolves differences held-out
  success cannot, but it measures learning on the training games, not generalisation.
- A difference of two cells is taken **paired by seed** where the cells share seeds (the same start model and the
  same training games: seed s draws the same first rollouts in every cell), as the mean of the per-seed differences
  with a t interval (n - 1 degrees of freedom); otherwise (different start models or games per cell) Welch's
  interval. A t interval, not a bootstrap: a percentile bootstrap over 3 seeds is the range of 3 values and covers
  the truth about 75% of the time.
- The verdict words (VERDICTS): **agrees** / **disagrees** (the interval excludes 0, in / against the paper's
  direction); **cannot tell at this scale** (the interval contains 0; it says how many seeds the measured spread
  would need for an interval of +-15 points, and what they would cost); **a floor** / **near a floor** (both cells
  at 0% / at most 10% in every seed: neither agrees nor disagrees). Where the paper found *no* difference, "agrees"
  needs the whole interval inside +- the paper's effect size (`margin`): a null with no power confirms nothing.
- Rows of 3 seeds or fewer say in how many seeds the difference had the paper's sign.

Sources: R. Wang, P. Ammanabrolu, *A Practitioner's Guide to Multi-turn Agentic RL*, arXiv 2510.01132 (§4
environment, §5 reward, §6 policy); Z. Wang et al., *RAGEN*, arXiv 2504.20073 (§4 Echo Trap, StarPO-S).
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable

from . import records as _records
from .judge import (
    AGREES,
    AREA,
    CANNOT_TELL,
    DISAGREES,
    FLOOR,
    NEAR,
    NEAR_FLOOR,
    NOT_RUN,
    RESOLVE,
    VERDICTS,
    Judged,
    compare_judged,
    delta_text,
    echo_trap,
    residual_sd,
    verdict_of,
)
from .records import load_results
from .report import metric_value
from .stats import bootstrap_diff_ci, difference_of, t_quantile

REGENERATE = "python results/regenerate.py"


@dataclass(frozen=True)
class Verdict:
    """One row of a verdict table: its Markdown-ready strings (finding, paper, ours, verdict, why, area,
    area_verdict) and, in `held_out` and `curve_area` (judge.Judged), the numbers ours and the verdicts are rendered
    from, for the readers that quote them (lessons, chapter_lessons)."""

    finding: str
    paper: str
    why: str
    """Why ours may differ from the paper's (scale, budget, game), whatever the verdict."""
    chapter: str
    """The notebook that teaches it, e.g. "02_reward"."""
    held_out: Judged
    """Held-out success (the papers' metric): ours (each cell's mean over seeds, the difference with its interval),
    the verdict, and their numbers (Δ in fractions, the seeds a cell, the seeds ±15 points would need, ...)."""
    curve_area: Judged | None = None
    """The same comparison on the learning-curve area (mean training success over steps); None where it does not
    apply (one evaluation without training, or another set of games): the table shows "—"."""

    @property
    def ours(self) -> str:
        return self.held_out.ours

    @property
    def verdict(self) -> str:
        """The verdict on held-out success (the papers' metric)."""
        return self.held_out.verdict

    @property
    def area(self) -> str:
        return self.curve_area.ours if self.curve_area else "—"

    @property
    def area_verdict(self) -> str:
        return self.curve_area.verdict if self.curve_area else "—"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


NOT_IN_RESULTS = "not in results/ yet"
"""`ours` of a finding whose sweep has no records in results/: not run, or running (a sweep that runs from a pinned
worktree writes into results/incoming/, and moves up when it is complete, with the chapter that reads it)."""


def _not_run(part: str, ours: str = NOT_IN_RESULTS) -> Judged:
    """A row whose results are missing: `ours` says what is missing, the verdict the command that brings them."""
    command = f"{REGENERATE} {part}"
    return Judged(ours, f"{NOT_RUN} (`{command}`)", command=command)


def compare_evaluations(evals: list[dict], a: dict, b: dict, expect_sign: int, names: tuple[str, str]
                        ) -> Judged:
    """(ours, verdict) with their numbers (judge.Judged) for the success rate of one evaluation
    (results/stage_evals.jsonl: a model without RL, one run, so no seeds) minus another's, both chosen by their
    fields (`a`, `b`: e.g. {"stage": "base", "level": "w2-o3-q4"}; the newest matching line is used). The interval
    is a bootstrap over GAMES (per-game outcomes, resampled independently), the only spread one evaluation has; the
    text says so."""
    def pick(fields: dict) -> dict | None:
        hits = [e for e in evals if all(e.get(k) == v for k, v in fields.items())]
        return hits[-1] if hits else None

    ea, eb = pick(a), pick(b)
    if ea is None or eb is None:
        return _not_run("evals")
    wins = [[float(won) for _, won, _ in e["eval"]["per_game"]] for e in (ea, eb)]
    means = (sum(wins[0]) / len(wins[0]), sum(wins[1]) / len(wins[1]))
    ours = "; ".join(f"{n} {_pct(m)} ({len(w)} games)" for n, m, w in zip(names, means, wins))
    diff = means[0] - means[1]
    ci = bootstrap_diff_ci(*wins)
    if ci is None:
        return Judged(ours, f"{NOT_RUN} (fewer than 2 games)", means=means)
    ours += f"; Δ {delta_text(diff, ci)} (interval over games: one model each)"
    if not any(wins[0]) and not any(wins[1]):
        verdict = f"{FLOOR} (both 0%): neither agrees nor disagrees"
    elif max(means) <= NEAR:
        verdict = f"{NEAR_FLOOR} (both ≤ {_pct(NEAR)}): neither agrees nor disagrees"
    elif ci[0] > 0 or ci[1] < 0:
        verdict = AGREES if (diff > 0) == (expect_sign > 0) else DISAGREES
    else:
        verdict = f"{CANNOT_TELL} (one model each: more games, not seeds, would narrow it)"
    return Judged(ours, verdict, diff, ci, means=means)


# ---------------------------------------------------------------------------------------------------------------
# The findings. Each: (chapter, finding, paper, why ours may differ, check(results) -> held-out success's Judged, or
# (held-out success's, the learning-curve area's))

MAIN_WHY = ("135M model (paper 1.5B / 7B); 5-command cooking games; 400 episodes at lr 1e-5 (paper: actor 1e-6); "
            "52 of the 64 training games keep the ingredient in the fridge, and 18 of the 36 runs end on that habit, "
            "take X from fridge (chapter 03 §6b): the cells differ mostly in whether a run breaks out of it")
SPLIT_WHY = ("a budget of 400 units (paper 1,000); 135M model; 2 seeds; RL's episodes are played on training games "
             "that mostly keep the ingredient in the fridge, and several runs end on the habit take X from fridge "
             "(chapter 04 §4)")
HARD_WHY = ("the harder games need two ingredients and 12 turns, and every SFT walkthrough here had one ingredient and "
            "5 commands")
BANDIT_WHY = "10 steps × 16 episodes (RAGEN: 200 steps × 128); 135M model (RAGEN 0.5B)"
BAL_WHY = ("135M model (paper 1.5B / 7B); 5-command cooking games, as many with the ingredient in the fridge as on "
           "the counter, in training, validation and held-out games alike (chapter 01 §5c); 400 episodes at lr 1e-5 "
           "(paper: actor 1e-6)")
BAL_RLOO_WHY = ("; RLOO ran the pilot's 2 seeds only: a run took nearly twice the planned 32 min, and the budget "
                "dropped cells before seeds (results/seeds_choice_balanced.json)")
GPU_RUN_MINUTES = 4.0
"""A cooking run of configs/cooking.yaml's shape on an H100 (results/algo_reward_first_design.jsonl: 25 steps in
126-394 s, median ~4 min): what the seeds-needed figure of a cooking row costs on a GPU."""


def _cost(records: list[dict], cells: int = 2, gpu_minutes: float | None = None) -> Callable[[int, int], str]:
    """need, have -> "about H CPU h more here[, G GPU h]": (need - have) more seeds of `cells` cells at the median
    time of the file's CPU runs (and gpu_minutes a run on a GPU). A run's time is the larger of its wall_seconds
    and its train_seconds: a run that resumed after a stop has a wall time of its last stretch only."""
    walls = [max(r["wall_seconds"], r.get("train_seconds") or 0.0) for r in records
             if r.get("wall_seconds") and r.get("device") == "cpu"]
    median = statistics.median(walls) if walls else None

    def cost(need: int, have: int) -> str:
        more = cells * max(0, need - have)
        if median is None or not more:
            return ""
        hours = more * median / 3600
        text = f"about {hours:.0f} CPU h more here" if hours >= 10 else f"about {hours:.1f} CPU h more here"
        return text + (f", {more * gpu_minutes / 60:.1f} GPU h" if gpu_minutes else "")
    return cost


def _both(records: list[dict], axis: str, a: Any, b: Any, where: dict, sign: int, names=None, margin=None,
          metric: str = "eval.success_rate", area: bool = True, gpu_minutes: float | None = None,
          effect: float | None = None) -> Judged | tuple[Judged, Judged]:
    """compare_judged() on held-out `metric` and, with `area`, on the learning-curve area: (held-out, area)."""
    cost = _cost(records, gpu_minutes=gpu_minutes)
    held = compare_judged(records, axis, a, b, where, sign, metric, names, margin, cost, effect)
    if not area:
        return held
    return held, compare_judged(records, axis, a, b, where, sign, AREA, names, margin, cost, effect)


def _main(axis, a, b, where, sign, margin=None, names=None, effect=None):
    def check(res):
        return (_both(res["algo_reward"], axis, a, b, where, sign, names, margin, gpu_minutes=GPU_RUN_MINUTES,
                      effect=effect)
                if res["algo_reward"] else _not_run("main"))
    return check


def _balanced(axis, a, b, where, sign, margin=None, names=None, effect=None):
    """A comparison of two cells of the balanced sweep (results/algo_reward_balanced.jsonl), paired by seed."""
    def check(res):
        return (_both(res["algo_reward_balanced"], axis, a, b, where, sign, names, margin,
                      gpu_minutes=GPU_RUN_MINUTES, effect=effect)
                if res["algo_reward_balanced"] else _not_run("balanced"))
    return check


def _stability(axis, a, b, where, sign, names=None):
    def check(res):
        return (_both(res["stability"], axis, a, b, where, sign, names) if res["stability"] else
                _not_run("stability"))
    return check


def _split(a_demos, b_demos, metric, sign, margin=None, effect=None):
    def check(res):
        return (_both(res["sft_rl_split"], "sft.demos", a_demos, b_demos, {}, sign,
                      (f"{a_demos} demos", f"{b_demos} demos"), margin, metric,
                      area=metric == "eval.success_rate", effect=effect) if res["sft_rl_split"] else _not_run("split"))
    return check


def _explore(a_turns, b_turns, sign, margin=None, effect=None):
    def check(res):
        return (_both(res["exploration"], "env.max_turns", a_turns, b_turns, {}, sign,
                      (f"{a_turns} turns", f"{b_turns} turns"), margin, effect=effect)
                if res["exploration"] else _not_run("explore"))
    return check


def _complexity(a_level, b_level, sign, names=None, effect=None):
    def check(res):
        return (_both(res["complexity"], "level", a_level, b_level, {}, sign, names, effect=effect)
                if res["complexity"] else _not_run("complexity"))
    return check


def _transfer(res):
    """A policy trained at w2-o3-q4 on the w8-o12-q4 held-out games (its `--also-eval w8`) against the policy trained
    at w8-o12-q4 on the same games (different training games and start models per level: Welch, not paired)."""
    recs = res["complexity"]
    if not recs:
        return _not_run("complexity")
    small = [r for r in recs if r["cell"].get("level") == "w2-o3-q4"]
    if not any(metric_value(r, "evals.w8.success_rate") is not None for r in small):
        return _not_run("complexity", "the w2-o3-q4 runs lack their w8-o12-q4 evaluation")
    moved = [{**r, "cell": {"trained at": "w2-o3-q4"}, "eval": r["evals"]["w8"]} for r in small if r.get("evals")]
    home = [{**r, "cell": {"trained at": "w8-o12-q4"}} for r in recs if r["cell"].get("level") == "w8-o12-q4"]
    return compare_judged(moved + home, "trained at", "w2-o3-q4", "w8-o12-q4", {}, 0,
                          names=("trained at w2-o3-q4", "trained at w8-o12-q4"), cost=_cost(recs))


def _base_levels(res):
    return compare_evaluations(res["stage_evals"], {"stage": "base", "level": "w2-o3-q4"},
                               {"stage": "base", "level": "w8-o12-q4"}, 1, ("w2-o3-q4", "w8-o12-q4"))


def _echo(records: list[dict], part: str) -> Judged:
    """echo_trap's (ours, verdict) over `records` (counts of runs and seeds: no difference, no interval)."""
    return Judged(*echo_trap(records)) if records else _not_run(part)


def _echo_main(res):
    return _echo(res["algo_reward"], "main")


def _echo_bandit(res):  # the 25-step GRPO run beside the 10-step runs
    return _echo(res["stability"] + res["stability_long"], "stability") if res["stability"] else _not_run("stability")


def _swe(res):
    return (_both(res["swe"], "reward.kind", "pass_ratio", "resolved", {}, 1, effect=0.18) if res["swe"] else
            _not_run("swe"))


def game_places(games: str) -> dict[str, str]:
    """{game: ingredient place} of a cooking game set named in results/game_sets.json (e.g. "cooking-heldout": the
    first `take X from PLACE` of each game's walkthrough, as regenerate.py wrote it); {} without the file or set."""
    path = _records.RESULTS_DIR / "game_sets.json"
    if not path.exists():
        return {}
    sets = json.loads(path.read_text()).get("sets", {})
    got = sets.get(games.rstrip("/").rsplit("/", 1)[-1])
    if not got:
        return {}
    return {g: places[0] for g, places in zip(got["games"], got["take_places"]) if places}


def won_by_place(record: dict, places: dict[str, str], place: str) -> int:
    """How many held-out games of `place` a run won (its eval's per_game, the games' places from game_places)."""
    return sum(1 for g, won, _ in record["eval"]["per_game"] if won and places.get(g) == place)


def success_by_place(records: list[dict], cells: tuple[str, str] = ("algo", "reward.kind")) -> str:
    """A Markdown table of a cooking sweep's held-out success split by where each game keeps its ingredient: per cell
    (the values of the two `cells` axes; PPO, GRPO, RLOO and sparse before dense, else file order), the share of
    the fridge games and of the counter games won (mean over the cell's runs) and how many runs won any counter
    game. The places come from results/game_sets.json (game_places of the records' eval_games); "" when records is
    empty or the set's places are unknown."""
    if not records:
        return ""
    places = game_places(records[0]["config"]["train"]["eval_games"])
    if not places:
        return ""
    n_place = {p: sum(v == p for v in places.values()) for p in ("fridge", "counter")}
    rows = [f"| {cells[0]} | {cells[1]} | fridge games won (mean over seeds) | counter games won | "
            "runs that won any counter game |", "|:--|:--|--:|--:|--:|"]
    order = {"ppo": 0, "grpo": 1, "rloo": 2, "sparse": 0, "dense": 1}
    keys = list(dict.fromkeys((r["cell"].get(cells[0]), r["cell"].get(cells[1])) for r in records))
    for a, k in sorted(keys, key=lambda c: (order.get(c[0], 3), order.get(c[1], 3), keys.index(c))):
        runs = [r for r in records if (r["cell"].get(cells[0]), r["cell"].get(cells[1])) == (a, k)]
        won = {p: [won_by_place(r, places, p) / n_place[p] for r in runs] for p in n_place}
        rows.append(f"| {a} | {k} | {sum(won['fridge']) / len(runs):.0%} of {n_place['fridge']} | "
                    f"{sum(won['counter']) / len(runs):.0%} of {n_place['counter']} | "
                    f"{sum(x > 0 for x in won['counter'])} of {len(runs)} |")
    return "\n".join(rows)


def place_habits(records: list[dict]) -> dict[str, int]:
    """How a cooking sweep's runs won their held-out games by ingredient place: {"fridge only", "counter only",
    "both", "none": number of runs}, from each run's eval per_game and the games' places (game_places); {} when
    records is empty or the places are unknown. A run that wins one place's games and none of the other's has
    learned where to look, not to read the room."""
    if not records:
        return {}
    places = game_places(records[0]["config"]["train"]["eval_games"])
    if not places:
        return {}
    out = {"fridge only": 0, "counter only": 0, "both": 0, "none": 0}
    for r in records:
        f, c = won_by_place(r, places, "fridge") > 0, won_by_place(r, places, "counter") > 0
        out["both" if f and c else "fridge only" if f else "counter only" if c else "none"] += 1
    return out


def first_update_table(records: list[dict]) -> str:
    """A Markdown table, one row per run (by seed, then cell): the approximate KL of its first update (nats, the k3
    estimate of KL(π_old ‖ π_θ), steps[0]["approx_kl"]), its training success at steps 1, 2 and 3 (16 sampled
    episodes a step), its lowest and last, and its held-out success: how large the first update was, and whether
    the run fell after it and came back. "" when records is empty."""
    if not records:
        return ""
    rows = ["| seed | run | first update's approx. KL | training success, steps 1 → 2 → 3 | lowest | last | "
            "held-out success |", "|--:|:--|--:|:--|--:|--:|--:|"]
    for r in sorted(records, key=lambda r: r["seed"]):
        success = [s["success_rate"] for s in r["steps"] if s.get("success_rate") is not None]
        kl = r["steps"][0].get("approx_kl") if r["steps"] else None
        rows.append(f"| {r['seed']} | {' '.join(str(v) for v in r['cell'].values())} | "
                    + (f"{kl:.3f}" if kl is not None else "—") + " | "
                    + " → ".join(_pct(x) for x in success[:3]) + f" | {_pct(min(success))} | {_pct(success[-1])} | "
                    f"{_pct(r['eval']['success_rate'])} |")
    return "\n".join(rows)


def _counter_wins(res):
    """Runs that won any held-out game whose ingredient is on the counter, PPO against GRPO (dense and sparse pooled:
    12 runs each); Fisher's exact test. The counter games are the only ones that tell the cells apart: most runs
    win every fridge game (chapter 03 §6b)."""
    from scipy.stats import fisher_exact

    recs = res["algo_reward"]
    if not recs:
        return _not_run("main")
    places = game_places(recs[0]["config"]["train"]["eval_games"])
    if not places:
        return _not_run("main", "results/game_sets.json lacks the held-out games' places")
    got = {}
    for algo in ("ppo", "grpo", "rloo"):
        runs = [r for r in recs if r["cell"].get("algo") == algo]
        got[algo] = (sum(won_by_place(r, places, "counter") > 0 for r in runs), len(runs))
    (kp, np_), (kg, ng) = got["ppo"], got["grpo"]
    p = fisher_exact([[kp, np_ - kp], [kg, ng - kg]]).pvalue
    ours = (", ".join(f"{a.upper() if a != 'ppo' else 'PPO'} {k} of {n}" for a, (k, n) in got.items())
            + f" runs won a counter game; PPO vs GRPO Fisher's exact p = {p:.3f}")
    return Judged(ours, (AGREES if p < 0.05 and kp / np_ > kg / ng else DISAGREES if p < 0.05 else
                         f"{CANNOT_TELL} (Fisher p = {p:.2f})"), p=p)


def _grpo_vs_start(res, sweep: str = "algo_reward"):
    """GRPO's held-out success per seed minus its SFT start's (results/stage_evals.jsonl: the start evaluated on the
    same held-out games, greedily): a one-sample t interval over the GRPO runs of both reward kinds (the start is one
    model; its own game-to-game noise is left out). The paper: GRPO ≈ the base it started from. `sweep`:
    "algo_reward" (its start flagged main_start, on cooking-heldout) or "algo_reward_balanced" (balanced_start, on
    cooking-bal-heldout)."""
    balanced = sweep == "algo_reward_balanced"
    recs, evals = res[sweep], res["stage_evals"]
    if not recs:
        return _not_run("balanced" if balanced else "main")
    flag, games = ("balanced_start", "cooking-bal-heldout") if balanced else ("main_start", "cooking-heldout")
    start = next((e for e in reversed(evals) if e.get(flag) and e.get("games") == games), None)
    if start is None:
        return _not_run("balanced" if balanced else "evals",
                        "the SFT start's held-out evaluation is not in results/stage_evals.jsonl")
    s0 = start["eval"]["success_rate"]
    out = {}
    for kind in ("dense", "sparse"):
        out.update({(kind, r["seed"]): r["eval"]["success_rate"] for r in recs
                    if r["cell"].get("algo") == "grpo" and r["cell"].get("reward.kind") == kind})
    grpo = dict(enumerate(out.values()))
    c = difference_of(grpo, {i: s0 for i in grpo}, paired=True)
    means = (sum(grpo.values()) / len(grpo), s0)
    ours = f"GRPO {_pct(means[0])} (n={len(grpo)} runs); SFT start {_pct(s0)}"
    shown = c is not None and c.ci is not None  # the Δ is said with its interval or not at all
    if shown:
        ours += f"; Δ {delta_text(c.diff, c.ci)} (t over runs)"
    verdict, need = verdict_of(c, 0, None, True)
    return Judged(ours, verdict, c.diff if shown else None, c.ci if shown else None, seeds_needed=need, means=means)


def _sft_alone(res):
    """The split's SFT model on 36 demonstrations alone (results/stage_evals.jsonl, seed 0) against the RL run that
    started from it (seed 0), game by game on the same held-out games: McNemar's exact test on the games one won and
    the other lost (scipy's binomtest)."""
    from scipy.stats import binomtest

    recs, evals = res["sft_rl_split"], res["stage_evals"]
    if not recs:
        return _not_run("split")
    sft = next((e for e in reversed(evals) if e.get("stage") == "sft" and e.get("demos") == 36
                and e.get("games") == "cooking-heldout" and e.get("seed", 0) == 0), None)
    rl = next((r for r in recs if r["cell"].get("sft.demos") == 36 and r["seed"] == 0), None)
    if sft is None or rl is None:
        return _not_run("split", "the 36-demonstration SFT model or its RL run is missing")
    a = {g: w for g, w, _ in sft["eval"]["per_game"]}
    b = {g: w for g, w, _ in rl["eval"]["per_game"]}
    only_a = sum(1 for g in a if a[g] and not b.get(g))
    only_b = sum(1 for g in b if b[g] and not a.get(g))
    p = binomtest(only_a, only_a + only_b, 0.5).pvalue if only_a + only_b else 1.0
    means = (sft["eval"]["success_rate"], rl["eval"]["success_rate"])
    ours = (f"SFT alone {_pct(means[0])}; then {rl['cell'].get('rl.episodes', 40)} RL episodes "
            f"{_pct(means[1])} (seed 0, {len(a)} games); games won by SFT alone only {only_a}, "
            f"by SFT then RL only {only_b}; McNemar's exact p = {p:.3f}")
    verdict = ((AGREES if only_a > only_b else DISAGREES) if p < 0.05 else
               f"{CANNOT_TELL} (McNemar p = {p:.2f}: one model each, seed 0)")
    return Judged(ours, verdict, means=means, p=p)


FINDINGS: list[tuple[str, str, str, str, Callable[[dict], Judged | tuple[Judged, Judged]]]] = [
    ("01_environment", "The base model's success falls as the world grows",
     "base 17% → 3% as worlds grow (1.5B)", "one evaluation per level (interval over games, not seeds); 135M base "
     "model, 64 held-out games per level", _base_levels),
    ("01_environment", "PPO's success falls as the world grows",
     "PPO 88% at w2-o3-q4 vs 51% at w8-o12-q4 (1.5B)", "15 RL steps (240 episodes) after SFT on 16 walkthroughs; "
     "2 seeds; 135M model; the SFT start wins few held-out games, and runs that win rarely early learn only to "
     "avoid invalid commands (chapter 01 §5)", _complexity("w2-o3-q4", "w8-o12-q4", 1, effect=0.37)),
    ("01_environment", "Simple worlds predict the complex: a policy trained at w2-o3-q4 does as well at w8-o12-q4 "
     "as one trained there", "finding (i): training in simple environments predicts generalisation",
     "the paper's claim is qualitative; here one pair of levels, 2 seeds, near a floor", _transfer),
    ("02_reward", "Dense turn rewards help PPO, on balanced games", "PPO 41% sparse → 58% dense (7B, cooking)",
     BAL_WHY + "; a max score of 3 leaves little partial credit to add",
     _balanced("reward.kind", "dense", "sparse", {"algo": "ppo"}, 1, effect=0.17)),
    ("02_reward", "Dense rewards do not help RLOO, on balanced games", "RLOO ≈ 55% under both dense settings (7B, "
     "cooking)", BAL_WHY + BAL_RLOO_WHY + "; 'agrees' needs the interval inside ±17 pts, PPO's dense effect in the "
     "paper", _balanced("reward.kind", "dense", "sparse", {"algo": "rloo"}, 0, margin=0.17)),
    ("02_reward", "Dense turn rewards help PPO, on the shortcut games", "PPO 41% sparse → 58% dense (7B, cooking)",
     MAIN_WHY + "; a max score of 3 leaves little partial credit to add",
     _main("reward.kind", "dense", "sparse", {"algo": "ppo"}, 1, effect=0.17)),
    ("02_reward", "Dense rewards do not help RLOO, on the shortcut games",
     "RLOO ≈ 55% under both dense settings (7B, cooking)",
     MAIN_WHY + "; 'agrees' needs the interval inside ±17 pts, PPO's dense effect in the paper",
     _main("reward.kind", "dense", "sparse", {"algo": "rloo"}, 0, margin=0.17)),
    ("03_policy", "PPO (critic, GAE) beats GRPO, dense reward, on balanced games",
     "PPO 88% vs GRPO ≈ base (1.5B, w2-o3-q4)", BAL_WHY,
     _balanced("algo", "ppo", "grpo", {"reward.kind": "dense"}, 1, effect=0.70)),
    ("03_policy", "PPO beats GRPO, sparse reward, on balanced games",
     "PPO above GRPO (the paper's ranking of the estimators)", BAL_WHY,
     _balanced("algo", "ppo", "grpo", {"reward.kind": "sparse"}, 1)),
    ("03_policy", "PPO beats RLOO, dense reward, on balanced games", "PPO 88% vs RLOO 51% (1.5B, w2-o3-q4)",
     BAL_WHY + BAL_RLOO_WHY, _balanced("algo", "ppo", "rloo", {"reward.kind": "dense"}, 1, effect=0.37)),
    ("03_policy", "GRPO stays near its start, on balanced games", "GRPO ≈ base (1.5B, w2-o3-q4)",
     "the start here is an SFT model chosen for headroom on the balanced validation games; 'agrees' needs the "
     "interval inside ±15 pts", lambda res: _grpo_vs_start(res, "algo_reward_balanced")),
    ("03_policy", "Echo Trap on balanced games: the reward spread falls before the reward",
     "RAGEN: group reward std falls before reward, then collapse", "25 steps per run (RAGEN: 200)",
     lambda res: _echo(res["algo_reward_balanced"], "balanced")),
    ("03_policy", "PPO (critic, GAE) beats GRPO, dense reward, on the shortcut games",
     "PPO 88% vs GRPO ≈ base (1.5B, w2-o3-q4)",
     MAIN_WHY, _main("algo", "ppo", "grpo", {"reward.kind": "dense"}, 1, effect=0.70)),
    ("03_policy", "PPO beats RLOO, dense reward, on the shortcut games", "PPO 88% vs RLOO 51% (1.5B, w2-o3-q4)",
     MAIN_WHY + "; at 7B on w2-o3-q4 the paper saw PPO ≈ RLOO ≈ 98%",
     _main("algo", "ppo", "rloo", {"reward.kind": "dense"}, 1, effect=0.37)),
    ("03_policy", "PPO beats GRPO, sparse reward, on the shortcut games",
     "PPO above GRPO (the paper's ranking of the estimators)",
     MAIN_WHY, _main("algo", "ppo", "grpo", {"reward.kind": "sparse"}, 1)),
    ("03_policy", "PPO breaks out of the fridge habit more often than GRPO",
     "PPO 88% vs GRPO ≈ base (1.5B): the critic learns what GRPO's tied groups cannot",
     "the counter games are the only held-out games that tell the cells apart (chapter 03 §6b); a run counts once "
     "whatever its reward kind", _counter_wins),
    ("03_policy", "GRPO stays near its start, on the shortcut games", "GRPO ≈ base (1.5B, w2-o3-q4)",
     "the start here is an SFT model chosen for headroom (chapter 03 §3); 'agrees' needs the interval inside ±15 pts",
     _grpo_vs_start),
    ("03_policy", "Echo Trap on the shortcut games: the reward spread falls before the reward",
     "RAGEN: group reward std falls before reward, then collapse", "25 steps per run (RAGEN: 200); most runs "
     "converge on a habit whose groups tie (chapter 03 §6b): a floor of the std without a fall is not the trap",
     _echo_main),
    ("01_environment", "A 2× turn budget beats 1× (exploration)", "max turns 6 → 55%, 8 (2× optimal) → 73%",
     "15 RL steps, 2 seeds; the walkthrough is 5 commands, so 10 turns is 2×; no run won a game with more turns "
     "that its seed lost with 5: the runs that won learned one habit, take the ingredient from the fridge "
     "(chapter 01 §5b)", _explore(10, 5, 1, effect=0.18)),
    ("01_environment", "More than 2× the turns adds little", "more than 8 turns adds little (73% at 8)",
     "15 RL steps, 2 seeds; 15 turns is 3× the walkthrough; seed 1's 15-turn policy prepares the meal, then loops "
     "instead of eating it when decoded greedily (chapter 01 §5b); 'agrees' needs the interval inside ±18 pts, the "
     "paper's 2× effect", _explore(15, 10, 0, margin=0.18)),
    ("04_sft_then_rl", "Mostly RL generalises worse to harder games than an SFT:RL mix",
     "all-RL ≈ 11% on harder games vs 59% for 60 demos + 400 episodes", "the fewest demos here is 4, not 0; "
     + HARD_WHY + "; " + SPLIT_WHY, _split(20, 4, "evals.hard.success_rate", 1, effect=0.48)),
    ("04_sft_then_rl", "More SFT, more in-domain success", "all-SFT 95% vs 85% for the mix, in domain",
     "the most demos here is 36 (360 units), not all; " + SPLIT_WHY,
     _split(36, 20, "eval.success_rate", 1, effect=0.10)),
    ("04_sft_then_rl", "SFT alone beats SFT then a little RL, in domain", "all-SFT 95% vs 85% for the mix",
     "one SFT model (seed 0) and the one RL run from it, on the same 64 games", _sft_alone),
    ("04_sft_then_rl", "On harder games the mix is about as good as mostly SFT", "mix 59% vs all-SFT 55%",
     HARD_WHY + "; " + SPLIT_WHY, _split(20, 36, "evals.hard.success_rate", 0)),
    ("05_stability", "Bandit: GRPO falls behind PPO (critic)",
     "RAGEN: GRPO collapses earlier than PPO on Bandit and Sokoban", BANDIT_WHY,
     _stability("algo.advantage", "gae", "grpo", {"algo.keep_top_std": 1.0}, 1, names=("PPO (gae)", "GRPO"))),
    ("05_stability", "Bandit: StarPO-S filter (keep 25%) rescues GRPO",
     "RAGEN: keeping 50% removed collapse (FrozenLake)", BANDIT_WHY + "; here the filter helps through a bias "
     "towards risk (chapter 05 §5)", _stability("algo.keep_top_std", 0.25, 1.0, {"algo.advantage": "grpo"}, 1,
                                                    names=("keep 25%", "keep all"))),
    ("05_stability", "Bandit: StarPO-S filter (keep 50%) rescues GRPO",
     "RAGEN: keeping 50% removed collapse (FrozenLake)", BANDIT_WHY,
     _stability("algo.keep_top_std", 0.5, 1.0, {"algo.advantage": "grpo"}, 1, names=("keep 50%", "keep all"))),
    ("05_stability", "Echo Trap on the bandit: the reward spread falls before the reward",
     "RAGEN: group reward std falls before reward, then collapse",
     BANDIT_WHY + "; a one-turn game has nothing to repeat", _echo_bandit),
    ("06_swe", "SWE: the test-pass-ratio reward beats the binary one",
     "GRPO, Qwen3-8B: 22% resolved (pass ratio) vs 4.2% (binary)", "planted one-statement bugs in toolz and boltons "
     "(SWE-Gym: real issues); 135M model; 8 held-out tasks per level", _swe),
]
RESULTS_FILES = ("algo_reward", "algo_reward_balanced", "stability", "stability_long", "sft_rl_split", "exploration",
                 "complexity", "stage_evals", "swe")


def verdicts(chapter: str | None = None, results: dict[str, list[dict]] | None = None) -> list[Verdict]:
    """The verdict rows of one chapter (e.g. "02_reward"), or of every chapter in chapter order.

    results: {name: records} for each name of RESULTS_FILES (default: read with records.load_results; tests pass
    their own). Raises ValueError for a chapter with no finding."""
    chosen = [f for f in FINDINGS if chapter is None or f[0] == chapter]
    if not chosen:
        raise ValueError(f"no finding belongs to chapter {chapter!r}: one of "
                         f"{', '.join(dict.fromkeys(f[0] for f in FINDINGS))}")
    res = results if results is not None else {name: load_results(name) for name in RESULTS_FILES}
    res = {name: res.get(name, []) for name in RESULTS_FILES}
    rows = []
    for ch, finding, paper, why, check in chosen:
        got = check(res)
        held, area = (got, None) if isinstance(got, Judged) else got
        rows.append(Verdict(finding, paper, why, ch, held, area))
    return rows


def verdict_table(chapter: str | None = None, results: dict[str, list[dict]] | None = None,
                  link: str | None = None, why: bool = True) -> str:
    """The Markdown table finding · paper · ours (held-out success) · verdict · ours (learning-curve area) · its
    verdict · why it may differ (verdicts()); with `link` (a path prefix such as "../notebooks/"), a chapter column
    linking each row's notebook; why=False leaves the why column out."""
    rows = verdicts(chapter, results)
    head = ("| finding | paper | ours: held-out success (the papers' metric) | verdict | ours: learning-curve area "
            "(mean training success) | its verdict |" + (" why it may differ |" if why else ""))
    head += " chapter |" if link is not None else ""
    lines = [head, "|:--" * head.count(" |") + "|"]
    for v in rows:
        line = f"| {v.finding} | {v.paper} | {v.ours} | {v.verdict} | {v.area} | {v.area_verdict} |" + \
            (f" {v.why} |" if why else "")
        lines.append(line + (f" [{v.chapter}]({link}{v.chapter}.ipynb) |" if link is not None else ""))
    return "\n".join(lines)


def lessons(results: dict[str, list[dict]] | None = None) -> str:
    """What the runs teach, in a few sentences whose every number is computed here from the results files (the
    README's and book/findings.md's lead, above the table): how the verdicts fall, why held-out success cannot
    resolve most of them and the learning-curve area can, the fridge shortcut of the training games, and the
    comparisons that do resolve. A sentence whose results are missing is left out."""
    res = results if results is not None else {name: load_results(name) for name in RESULTS_FILES}
    res = {name: res.get(name, []) for name in RESULTS_FILES}
    rows = verdicts(None, res)
    words = {w: sum(v.verdict.startswith(w) for v in rows) for w in VERDICTS}
    waiting = sorted({v.held_out.command for v in rows if v.verdict.startswith(NOT_RUN) and v.held_out.command})
    out = [f"Of the {len(rows) - words[NOT_RUN]} findings tested, {words[AGREES]} agree with the papers, "
           f"{words[DISAGREES]} disagree, {words[CANNOT_TELL]} cannot be told at this scale and "
           f"{words[FLOOR] + words[NEAR_FLOOR]} sit on a floor where neither model won anything"
           + (f"; {words[NOT_RUN]} more wait for runs not in results/ yet ({', '.join(f'`{c}`' for c in waiting)})"
              if words[NOT_RUN] else "") + "."]
    main = res["algo_reward"]
    held, area = residual_sd(main), residual_sd(main, AREA)
    if held and area:
        n = held[1]
        half = {k: t_quantile(n - 1) * sd * math.sqrt(2 / n) for k, (sd, _) in (("held", held), ("area", area))}
        # the part of it one evaluation's games explain: the binomial variance p(1 - p) / games, averaged over runs
        games = statistics.fmean(r["eval"]["success_rate"] * (1 - r["eval"]["success_rate"]) / r["eval"]["n_games"]
                                 for r in main)
        out.append(f"In the algorithm × reward sweep the seed-to-seed noise left once each seed's shared start is "
                   f"taken out is {100 * held[0]:.0f} points of held-out success (the held-out games' own binomial "
                   f"noise is {100 * games / held[0] ** 2:.0f}% of its variance, so more games would not help) but "
                   f"{100 * area[0]:.0f} points of the learning-curve area (mean training success over the 25 "
                   f"steps), so {n} seeds resolve differences of about ±{100 * half['held']:.0f} points in the one "
                   f"and ±{100 * half['area']:.0f} in the other: the area is the outcome with the power to decide, "
                   "held-out success the papers' metric.")
    places = game_places(main[0]["config"]["train"]["eval_games"]) if main else {}
    train = game_places(main[0]["config"]["env"]["games"]) if main else {}
    if places and train:
        fridge = {g for g, p in places.items() if p == "fridge"}
        habit = sum({g for g, w, _ in r["eval"]["per_game"] if w} == fridge for r in main)
        n_tr = sum(p == "fridge" for p in train.values())
        out.append(f"The training games hid a shortcut: {n_tr} of {len(train)} keep the ingredient in the fridge "
                   f"(held-out: {len(fridge)} of {len(places)}), so `take X from fridge` wins most training episodes "
                   f"without reading the room, and {habit} of the {len(main)} runs ended winning exactly the held-out "
                   "fridge games; the algorithms differ mostly in whether a run breaks out of that habit.")
    bal = res["algo_reward_balanced"]
    habits = place_habits(bal)
    if habits:
        out.append(f"On the balanced games, where as many games keep the ingredient on the counter as in the fridge, "
                   f"that shortcut is gone but habits are not: of the {len(bal)} runs, {habits['fridge only']} won "
                   f"only fridge games and {habits['counter only']} only counter games, {habits['both']} won games "
                   f"of both places and {habits['none']} won nothing.")
    by = {v.finding: v for v in rows}
    told = []
    for games in ("balanced games", "shortcut games"):
        suffix = ", on balanced games" if games == "balanced games" else ", on the shortcut games"
        sparse = by.get("PPO beats GRPO, sparse reward" + suffix)
        grpo = by.get("GRPO stays near its start" + suffix)
        if sparse and sparse.verdict in (AGREES, DISAGREES):
            told.append(f"with a sparse reward PPO {'beat' if sparse.verdict == AGREES else 'lost to'} GRPO on the "
                        f"{games} ({sparse.held_out.delta})")
        if grpo and grpo.verdict.startswith(AGREES):
            told.append(f"GRPO ended near its SFT start on the {games} ({grpo.held_out.delta}), as the paper's "
                        "“GRPO ≈ base”")
    alone = by.get("SFT alone beats SFT then a little RL, in domain")
    if alone and alone.verdict == AGREES:
        (sft, rl), p = alone.held_out.means, alone.held_out.p
        told.append(f"SFT on 36 demonstrations alone beat SFT then 40 RL episodes on the same games "
                    f"({_pct(sft)} against {_pct(rl)}, McNemar's exact p = {p:.3f})")
    if told:
        out.append("What does resolve: " + "; ".join(told) + ".")
    for games, suffix in (("balanced games", ", on balanced games"), ("shortcut games", ", on the shortcut games")):
        dense = by.get("Dense turn rewards help PPO" + suffix)
        if dense and dense.curve_area and dense.area_verdict.startswith((AGREES, DISAGREES)):
            out.append(f"Dense turn rewards {'helped' if dense.area_verdict.startswith(AGREES) else 'did not help'} "
                       f"PPO on the {games}: on the learning-curve area dense minus sparse is "
                       f"{dense.curve_area.delta}, "
                       "against the paper's +17 points of held-out success.")
    return " ".join(out)


def chapter_lessons(chapter: str, results: dict[str, list[dict]] | None = None) -> str:
    """What one chapter's runs teach, a sentence or two per finding, every number taken from its verdict row
    (verdicts(chapter, results)), for the chapter's closing section above its verdict table: which findings resolve
    and how (held-out success first, the papers' metric; else the learning-curve area), which cannot be told and how
    many seeds a cell would tell them (stats.seeds_needed's estimate as the verdict quotes it: Judged.seeds_needed),
    which sit on a floor (neither side won anything) and which are not run yet; and, when the chapter's comparisons
    have few seeds, what Student's t does to an interval over them (stats.t_quantile). Chapters 02 and 03 lead with
    lessons() instead, the sweep-wide account. Raises ValueError for a chapter with no finding (as verdicts())."""
    rows = verdicts(chapter, results)
    sentences, few = [], []
    for v in rows:
        held, area = v.verdict, v.area_verdict
        d_held = v.held_out.delta
        d_area = v.curve_area.delta if v.curve_area else None
        name = f"*{v.finding}*"
        if held.startswith((AGREES, DISAGREES)):
            word = "agrees" if held.startswith(AGREES) else "disagrees"
            how = f"held-out success, Δ {d_held}" if d_held else "; ".join(v.ours.split("; ")[:2])
            sentences.append(f"{name} {word} with the paper ({how}).")
        elif area.startswith((AGREES, DISAGREES)) and d_area:
            word = "agrees" if area.startswith(AGREES) else "disagrees"
            sentences.append(f"{name} {word} on the learning-curve area (Δ {d_area}) while held-out "
                             f"success cannot tell" + (f" (Δ {d_held})." if d_held else "."))
        elif held.startswith((FLOOR, NEAR_FLOOR)):
            won = "anything" if held.startswith(FLOOR) else "more than a game or two"
            sentences.append(f"{name} sits on a floor: neither side won {won}, so the comparison says nothing "
                             "either way.")
        elif held.startswith(NOT_RUN):
            sentences.append(f"{name} is not run yet: {held.removeprefix(NOT_RUN).strip(' :()')}.")
        else:  # cannot tell at this scale
            need = v.held_out.seeds_needed
            need_area = v.curve_area.seeds_needed if v.curve_area else None
            said = ([f"Δ {d_held}"] if d_held else []) + \
                ([] if need else [held.removeprefix(CANNOT_TELL).strip(" ()")])
            tail = f" ({'; '.join(p for p in said if p)})" if any(said) else ""
            if need:
                tail += f"; about {need} seeds a cell would resolve ±{100 * RESOLVE:.0f} points"
                if need_area and need_area < need:
                    tail += f" (on the learning-curve area, about {need_area})"
            sentences.append(f"{name} cannot be told at this scale{tail}.")
            few += [n for n in v.held_out.seeds if n]
    words = {w: sum(v.verdict.startswith(w) for v in rows) for w in VERDICTS}
    floor = words[FLOOR] + words[NEAR_FLOOR]
    head = (f"This chapter tests {len(rows)} of the papers' findings: {words[AGREES]} "
            f"agree{'s' * (words[AGREES] == 1)}, {words[DISAGREES]} disagree{'s' * (words[DISAGREES] == 1)}, "
            f"{words[CANNOT_TELL]} cannot be told at this scale, {floor} sit{'s' * (floor == 1)} on a floor"
            + (f" and {words[NOT_RUN]} {'is' if words[NOT_RUN] == 1 else 'are'} not run yet" if words[NOT_RUN] else "")
            + ".")
    out = [head, *sentences]
    if few and min(few) <= 3:
        n = min(few)
        out.append(f"Why so many cannot tell: over {n} seeds a cell an interval multiplies the seeds' spread by "
                   f"Student's t with {n - 1} degree{'s' if n > 2 else ''} of freedom, {t_quantile(n - 1):.1f} "
                   f"(with 10 seeds it would be {t_quantile(9):.1f}), so even a difference that points the same "
                   "way in every seed gets an interval far wider than the effect: these runs show a direction, "
                   "not a verdict.")
    return " ".join(out)


PAPER_SETTINGS = {  # Practitioner's Guide (arXiv 2510.01132, appendix and scripts): what a hyperparameter table shows
    "model": "Qwen2.5-1.5B / 7B-Instruct", "train.lr": "1e-6 (actor)", "train.value_lr": "1e-5 (critic)",
    "algo.clip_low": "0.2", "algo.clip_high": "0.2", "algo.kl_coef": "0.01 (PPO), 0.001 (RLOO), in the reward",
    "algo.gamma": "1", "algo.lam": "1", "algo.group_size": "4 (GRPO)", "train.temperature": "0.7",
    "train.eval_temperature": "0.4", "episodes per step": "256 (batch)",
    "RL episodes": "≈ 400 (the SFT:RL budget study)",
    "env.max_turns": "8–12 (small TextWorld), 24 (cooking)", "algo.normalize_advantages": "yes (veRL's GAE whitens)",
}
"""The paper's settings for the hyperparameter table of chapters 02–04 (../shared/REFERENCE.md's summary)."""
RAGEN_SETTINGS = {  # RAGEN (arXiv 2504.20073, §3-4 and its defaults): chapter 05's table
    "model": "Qwen2.5-0.5B-Instruct", "algo.group_size": "16 rollouts per prompt", "episodes per step": "8 × 16 = 128",
    "RL episodes": "200 steps × 128", "train.temperature": "1.0", "train.eval_temperature": "0.5",
    "algo.clip_low": "0.2 (StarPO-S)", "algo.clip_high": "0.28 (StarPO-S)", "algo.kl_coef": "0 (StarPO-S)",
    "algo.entropy_coef": "0.001 (StarPO-S)", "reward.format_penalty": "0.1",
}
"""RAGEN's settings for chapter 05's hyperparameter table (../shared/REFERENCE.md's summary)."""


def hyperparameter_table(config: dict, paper: dict[str, str] | None = None) -> str:
    """Ours beside the paper's, CleanRL-style: a Markdown table setting · ours · paper.

    config: a run's full config as a record holds it (record["config"]: {"env": {...}, "train": {...}, ...}); its
    dotted fields are read, plus three derived rows (model: the embedded SmolLM2-135M-Instruct, and the SFT model RL
    started from; episodes per step = games_per_step × group_size; RL episodes = steps × that).
    paper: {setting: text}, default PAPER_SETTINGS. Raises KeyError naming a dotted field the config lacks."""
    paper = PAPER_SETTINGS if paper is None else paper

    def get(dotted: str):
        value: Any = config
        for part in dotted.split("."):
            if not isinstance(value, dict) or part not in value:
                raise KeyError(f"the config has no field {dotted!r}")
            value = value[part]
        return value

    per_step = get("train.games_per_step") * get("algo.group_size")
    name = str(get("model.name"))
    model = "SmolLM2-135M-Instruct" + ("" if name == "embedded" else f" (from `{name}`)")
    derived = {"model": model, "episodes per step": per_step, "RL episodes": get("train.steps") * per_step}
    lines = ["| setting | ours | paper |", "|:--|:--|:--|"]
    for key, theirs in paper.items():
        ours = derived[key] if key in derived else get(key)
        text = ("yes" if ours else "no") if isinstance(ours, bool) else f"{ours:g}" if isinstance(ours, float) else ours
        if key == "train.eval_temperature" and ours == 0:
            text = "0 (greedy)"
        lines.append(f"| {key} | {text} | {theirs} |")
    return "\n".join(lines)
