"""The two papers' findings set against this project's results files: one verdict row per finding.

The chapters close with `verdict_table(chapter)`, the book's findings page and the README show `verdict_table()`
(written by `python results/findings.py --write`), so a verdict is computed in one place and the three cannot
disagree. Every row reads results files only (records.load_results); nothing is typed.

A row: the finding, the paper's number, ours (held-out success, mean over seeds, the difference over the seeds both
cells have and its 95% percentile-bootstrap interval: report.difference), the verdict, and why ours may differ
(model size, budget, game). The verdict of a difference:
- "agrees" / "disagrees": the interval excludes 0 and its sign is / is not the paper's;
- "no difference at this scale": the interval contains 0 (" (agrees)" appended where the paper found none either;
  a note appended where both sides won nothing: a floor, not evidence either way);
- "cannot tell yet": a cell has fewer than 2 seeds, or the sweep has not run (the command that runs it is named).

Sources: R. Wang, P. Ammanabrolu, *A Practitioner's Guide to Multi-turn Agentic RL*, arXiv 2510.01132 (§4
environment, §5 reward, §6 policy); Z. Wang et al., *RAGEN*, arXiv 2504.20073 (§4 Echo Trap, StarPO-S).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .diagnostics import collapse_step
from .records import load_results
from .report import bootstrap_diff_ci, cell, difference, metric_value

REGENERATE = "python results/regenerate.py"
AGREES, DISAGREES, CANNOT_TELL = "agrees", "disagrees", "cannot tell yet"


@dataclass(frozen=True)
class Verdict:
    """One row of a verdict table (all strings, Markdown-ready)."""

    finding: str
    paper: str
    ours: str
    verdict: str
    why: str
    """Why ours may differ from the paper's (scale, budget, game), whatever the verdict."""
    chapter: str
    """The notebook that teaches it, e.g. "02_reward"."""


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


NOT_IN_RESULTS = "not in results/ yet"
"""`ours` of a finding whose sweep has no records in results/: not run, or running (a sweep that runs from a pinned
worktree writes into results/incoming/, and moves up when it is complete, with the chapter that reads it)."""


def _not_run(part: str) -> tuple[str, str]:
    return NOT_IN_RESULTS, f"{CANNOT_TELL} (`{REGENERATE} {part}`)"


def _judge(diff: float, lo: float, hi: float, expect_sign: int) -> str:
    if lo <= 0 <= hi:
        return "no difference at this scale" + (f" ({AGREES})" if expect_sign == 0 else "")
    return AGREES if expect_sign != 0 and (diff > 0) == (expect_sign > 0) else DISAGREES


def _verdict(diff: float, lo: float, hi: float, expect_sign: int, floor: str | None = None) -> str:
    """_judge's verdict; where both sides won nothing (`floor` not None: where, e.g. " in every seed") it says so,
    whatever the paper's direction: a floor is not evidence either way."""
    if floor is not None:  # not "agrees" either, where the paper found no difference
        return f"no difference at this scale (both 0%{floor}: a floor, not evidence either way)"
    return _judge(diff, lo, hi, expect_sign)


def compare(records: list[dict], axis: str, a: Any, b: Any, where: dict | None = None, expect_sign: int = 1,
            metric: str = "eval.success_rate", names: tuple[str, str] | None = None) -> tuple[str, str]:
    """(ours, verdict) for mean(a) − mean(b) of `metric` between two values of `axis` within `where` ({axis: value}
    held fixed), over the seeds both cells have (report.difference; the seeds left out are named in `ours`).

    expect_sign: +1 where the paper found a > b, -1 where a < b, 0 where it found no difference. `names` label a and b
    in the text (default: the values). A success rate of 0 in every seed of both cells is a floor, and the verdict says
    so. Raises ValueError (from report.cell) when `where` leaves an axis unnamed."""
    where = where or {}
    na, nb = names or (str(a), str(b))
    ca, cb = (cell(records, metric, **where, **{axis: v}) for v in (a, b))
    ours = "; ".join(f"{n} {_pct(c.mean)} (n={c.n})" if c.n else f"{n} not run" for n, c in ((na, ca), (nb, cb)))
    d = difference(ca, cb)
    if d.ci is None:
        return ours, (f"{CANNOT_TELL} (fewer than 2 seeds in a cell)" if min(ca.n, cb.n) < 2 else
                      f"{CANNOT_TELL} (fewer than 2 seeds common to both cells)")
    (lo, hi) = d.ci
    ours += f"; Δ {100 * d.diff:+.0f} pts [{100 * lo:+.0f}, {100 * hi:+.0f}]"
    if d.dropped_a or d.dropped_b:
        left = [f"{n} seed {s}" for n, seeds in ((na, d.dropped_a), (nb, d.dropped_b)) for s in seeds]
        ours += f" over the {d.n} seeds both have (left out: {', '.join(left)})"
    floor = metric.endswith("success_rate") and not any((*ca.outcomes.values(), *cb.outcomes.values()))
    return ours, _verdict(d.diff, lo, hi, expect_sign, " in every seed" if floor else None)


def collapse(records: list[dict]) -> tuple[str, str]:
    """RAGEN's Echo Trap signature in the training curves, by the library's one definition: the run raised the
    collapse detector's `reward_std_collapse` alert (diagnostics.collapse_step: the within-group return std at most
    0.05 for 5 consecutive steps while training success is below 0.9; records written before the detector existed
    are replayed through it)."""
    fired = sorted(s for s in map(collapse_step, records) if s is not None)
    where = f" (steps {fired[0]}-{fired[-1]})" if fired else ""
    return (f"{len(fired)} of {len(records)} runs raised the reward-std collapse alert{where}: group return std "
            "<= 0.05 for 5 steps before success converged", "agrees (a collapse is seen)" if fired else
            "not seen at this scale")


def compare_evaluations(evals: list[dict], a: dict, b: dict, expect_sign: int, names: tuple[str, str]
                        ) -> tuple[str, str]:
    """(ours, verdict) for the success rate of one evaluation (results/stage_evals.jsonl: a model without RL, one
    run, so no seeds) minus another's, both chosen by their fields (`a`, `b`: e.g. {"stage": "base", "level":
    "w2-o3-q4"}; the newest matching line is used). The interval is a bootstrap over GAMES (per-game outcomes,
    resampled independently), the only spread one evaluation has; the text says so."""
    def pick(fields: dict) -> dict | None:
        hits = [e for e in evals if all(e.get(k) == v for k, v in fields.items())]
        return hits[-1] if hits else None

    ea, eb = pick(a), pick(b)
    if ea is None or eb is None:
        return NOT_IN_RESULTS, f"{CANNOT_TELL} (`{REGENERATE} evals`)"
    wins = [[float(won) for _, won, _ in e["eval"]["per_game"]] for e in (ea, eb)]
    ours = "; ".join(f"{n} {_pct(sum(w) / len(w))} ({len(w)} games)" for n, w in zip(names, wins))
    diff = sum(wins[0]) / len(wins[0]) - sum(wins[1]) / len(wins[1])
    ci = bootstrap_diff_ci(*wins)
    if ci is None:
        return ours, f"{CANNOT_TELL} (fewer than 2 games)"
    ours += f"; Δ {100 * diff:+.0f} pts [{100 * ci[0]:+.0f}, {100 * ci[1]:+.0f}] (interval over games: one model each)"
    return ours, _verdict(diff, *ci, expect_sign, "" if not any(wins[0]) and not any(wins[1]) else None)


# ---------------------------------------------------------------------------------------------------------------
# The findings. Each: (chapter, finding, paper, why ours may differ, results files, check(results) -> (ours, verdict))

MAIN_WHY = ("135M model (paper 1.5B / 7B); 5-command cooking games; 400 episodes at lr 1e-5 (paper: actor 1e-6); "
            "many runs of every algorithm end on one habit, take X from fridge (chapter 03 §6)")
SPLIT_WHY = ("a budget of 400 units (paper 1,000); 135M model; 2 seeds; RL's episodes are played on training games "
             "that mostly keep the ingredient in the fridge, and several runs end on the habit take X from fridge "
             "(chapter 04 §4)")
HARD_WHY = ("the harder games need two ingredients and 12 turns, and every SFT walkthrough here had one ingredient and "
            "5 commands")
BANDIT_WHY = "10 steps × 16 episodes (RAGEN: 200 steps × 128); 135M model (RAGEN 0.5B)"


def _main(axis, a, b, where, sign):
    def check(res):
        return compare(res["algo_reward"], axis, a, b, where, sign) if res["algo_reward"] else _not_run("main")
    return check


def _stability(axis, a, b, where, sign, names=None):
    def check(res):
        return (compare(res["stability"], axis, a, b, where, sign, names=names) if res["stability"] else
                _not_run("stability"))
    return check


def _split(a_demos, b_demos, metric, sign):
    def check(res):
        return (compare(res["sft_rl_split"], "sft.demos", a_demos, b_demos, {}, sign, metric,
                        names=(f"{a_demos} demos", f"{b_demos} demos")) if res["sft_rl_split"] else _not_run("split"))
    return check


def _explore(a_turns, b_turns, sign):
    def check(res):
        return (compare(res["exploration"], "env.max_turns", a_turns, b_turns, {}, sign,
                        names=(f"{a_turns} turns", f"{b_turns} turns")) if res["exploration"] else _not_run("explore"))
    return check


def _complexity(a_level, b_level, sign, metric="eval.success_rate", names=None):
    def check(res):
        return (compare(res["complexity"], "level", a_level, b_level, {}, sign, metric, names=names)
                if res["complexity"] else _not_run("complexity"))
    return check


def _transfer(res):
    """A policy trained at w2-o3-q4 on the w8-o12-q4 held-out games (its `--also-eval w8`) against the policy trained
    at w8-o12-q4 on the same games, seed by seed."""
    recs = res["complexity"]
    if not recs:
        return _not_run("complexity")
    small = [r for r in recs if r["cell"].get("level") == "w2-o3-q4"]
    if not any(metric_value(r, "evals.w8.success_rate") is not None for r in small):
        return "the w2-o3-q4 runs lack their w8-o12-q4 evaluation", f"{CANNOT_TELL} (`{REGENERATE} complexity`)"
    moved = [{**r, "cell": {"trained at": "w2-o3-q4"}, "eval": r["evals"]["w8"]} for r in small if r.get("evals")]
    home = [{**r, "cell": {"trained at": "w8-o12-q4"}} for r in recs if r["cell"].get("level") == "w8-o12-q4"]
    return compare(moved + home, "trained at", "w2-o3-q4", "w8-o12-q4", {}, 0,
                   names=("trained at w2-o3-q4", "trained at w8-o12-q4"))


def _base_levels(res):
    return compare_evaluations(res["stage_evals"], {"stage": "base", "level": "w2-o3-q4"},
                               {"stage": "base", "level": "w8-o12-q4"}, 1, ("w2-o3-q4", "w8-o12-q4"))


def _collapse_main(res):
    return collapse(res["algo_reward"]) if res["algo_reward"] else _not_run("main")


def _collapse_bandit(res):  # the 25-step GRPO run beside the 10-step runs, which drift but are too short to close
    return collapse(res["stability"] + res["stability_long"]) if res["stability"] else _not_run("stability")


def _swe(res):
    return (compare(res["swe"], "env.swe_reward", "pass_ratio", "resolved", {}, 1) if res["swe"] else
            _not_run("swe"))


FINDINGS: list[tuple[str, str, str, str, Callable[[dict], tuple[str, str]]]] = [
    ("01_environment", "The base model's success falls as the world grows",
     "base 17% → 3% as worlds grow (1.5B)", "one evaluation per level (interval over games, not seeds); 135M base "
     "model, 64 held-out games per level", _base_levels),
    ("01_environment", "PPO's success falls as the world grows",
     "PPO 88% at w2-o3-q4 vs 51% at w8-o12-q4 (1.5B)", "15 RL steps (240 episodes) after SFT on 16 walkthroughs; "
     "2 seeds; 135M model; the SFT start wins few held-out games, and runs that win rarely early learn only to "
     "avoid invalid commands (chapter 01 §5)", _complexity("w2-o3-q4", "w8-o12-q4", 1)),
    ("01_environment", "Simple worlds predict the complex: a policy trained at w2-o3-q4 does as well at w8-o12-q4 "
     "as one trained there", "finding (i): training in simple environments predicts generalisation",
     "the paper's claim is qualitative; here one pair of levels, 2 seeds", _transfer),
    ("02_reward", "Dense turn rewards help PPO", "PPO 41% sparse → 58% dense (7B, cooking)",
     MAIN_WHY + "; a max score of 3 leaves little partial credit to add",
     _main("reward.kind", "dense", "sparse", {"algo": "ppo"}, 1)),
    ("02_reward", "Dense rewards do not help RLOO", "RLOO ≈ 55% under both dense settings (7B, cooking)",
     MAIN_WHY, _main("reward.kind", "dense", "sparse", {"algo": "rloo"}, 0)),
    ("03_policy", "PPO (critic, GAE) beats GRPO, dense reward", "PPO 88% vs GRPO ≈ base (1.5B, w2-o3-q4)",
     MAIN_WHY, _main("algo", "ppo", "grpo", {"reward.kind": "dense"}, 1)),
    ("03_policy", "PPO beats RLOO, dense reward", "PPO 88% vs RLOO 51% (1.5B, w2-o3-q4)",
     MAIN_WHY + "; at 7B on w2-o3-q4 the paper saw PPO ≈ RLOO ≈ 98%",
     _main("algo", "ppo", "rloo", {"reward.kind": "dense"}, 1)),
    ("03_policy", "Echo Trap: reward spread collapses", "RAGEN: group reward std falls before reward, collapse",
     "25 steps per run (RAGEN: 200)", _collapse_main),
    ("01_environment", "A 2× turn budget beats 1× (exploration)", "max turns 6 → 55%, 8 (2× optimal) → 73%",
     "15 RL steps, 2 seeds; the walkthrough is 5 commands, so 10 turns is 2×; no run won a game with more turns "
     "that its seed lost with 5: the runs that won learned one habit, take the ingredient from the fridge "
     "(chapter 01 §5b)", _explore(10, 5, 1)),
    ("01_environment", "More than 2× the turns adds little", "more than 8 turns adds little",
     "15 RL steps, 2 seeds; 15 turns is 3× the walkthrough; seed 1's 15-turn policy prepares the meal, then loops "
     "instead of eating it when decoded greedily (chapter 01 §5b)", _explore(15, 10, 0)),
    ("04_sft_then_rl", "Mostly RL generalises worse to harder games than an SFT:RL mix",
     "all-RL ≈ 11% on harder games vs 59% for 60 demos + 400 episodes", "the fewest demos here is 4, not 0; "
     + HARD_WHY + "; " + SPLIT_WHY, _split(20, 4, "evals.hard.success_rate", 1)),
    ("04_sft_then_rl", "More SFT, more in-domain success", "all-SFT 95% vs 85% for the mix, in domain",
     "the most demos here is 36 (360 units), not all; " + SPLIT_WHY, _split(36, 20, "eval.success_rate", 1)),
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
    ("05_stability", "Echo Trap on the bandit", "RAGEN: group reward std falls before reward, collapse",
     BANDIT_WHY + "; a one-turn game has nothing to repeat", _collapse_bandit),
    ("06_swe", "SWE: the test-pass-ratio reward beats the binary one",
     "GRPO, Qwen3-8B: 22% resolved (pass ratio) vs 4.2% (binary)", "planted one-statement bugs in toolz and boltons "
     "(SWE-Gym: real issues); 135M model; 8 held-out tasks per level", _swe),
]
RESULTS_FILES = ("algo_reward", "stability", "stability_long", "sft_rl_split", "exploration", "complexity",
                 "stage_evals", "swe")


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
    return [Verdict(finding, paper, *check(res), why, ch) for ch, finding, paper, why, check in chosen]


def verdict_table(chapter: str | None = None, results: dict[str, list[dict]] | None = None,
                  link: str | None = None, why: bool = True) -> str:
    """The Markdown table finding · paper · ours · verdict · why it may differ (verdicts()); with `link` (a path
    prefix such as "../notebooks/"), a chapter column linking each row's notebook; why=False leaves the why column
    out (the README's shorter table)."""
    rows = verdicts(chapter, results)
    head = "| finding | paper | ours (held-out success, mean over seeds) | verdict |" + (" why it may differ |" if why
                                                                                     else "")
    head += " chapter |" if link is not None else ""
    lines = [head, "|:--" * head.count(" |") + "|"]
    for v in rows:
        line = f"| {v.finding} | {v.paper} | {v.ours} | {v.verdict} |" + (f" {v.why} |" if why else "")
        lines.append(line + (f" [{v.chapter}]({link}{v.chapter}.ipynb) |" if link is not None else ""))
    return "\n".join(lines)


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
