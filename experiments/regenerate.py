"""Regenerate every results file the chapters read, with one command; stopped, the same command resumes.

    python results/regenerate.py all            # games, SFT models, evaluations, the probe, pilot and sweeps
    python results/regenerate.py main --jobs 8  # one part; --jobs runs that many commands at once (a GPU machine)

What each part runs is its plan, a YAML file beside the run configs: configs/sweeps/PART.yaml (the cells, seeds,
SFT candidates, step counts and base config of that sweep, each file's header naming the results file it writes),
and configs/sweeps/games.yaml (the game sets the parts share). experiments.sweep_plans reads and checks them at
import: a missing or malformed plan, an unknown key or a wrong type stops the command with one line naming the file
and the key. What stays here is how a part runs: the rules that choose (choose_sft, choose_seeds and seeds_for,
choose_balanced_start and seeds_for_paired, with their numbers: SFT_BAND, TARGET_SFT_SUCCESS, BEHAVIOUR_T,
MAX_DIFF_HALF_WIDTH), the naming of SFT dirs and runs (sft_dir, SFT_LR, sweep), the job runner and the --dry-run cost
model. Edit a plan, then `python results/regenerate.py PART --dry-run` prints what the edit would run.

Parts (each a results file; the commands it runs are printed, and are ordinary `agentrl` commands):
- pilot       the main sweep's PPO-dense and RLOO-dense cells x seeds 0-1 (results/algo_reward.jsonl); their
              seed-to-seed spread sets the main sweep's number of seeds (results/seeds_choice.json; seeds_for).
- probe       results/ppo_probe.jsonl: PPO dense seed 0 from the chosen start at lr 1e-5 / 3e-5, with and without
              whitened advantages, evaluated on the VALIDATION games (probe.yaml: why configs/cooking.yaml uses lr
              1e-5 and no whitening).
- behaviour   results/sft_behaviour.json: every SFT candidate plays the validation games once at the RL sampling
              temperature (0.7, seed 0), as its first rollouts would; the greedy numbers of the SFT rounds beside.
- main        results/algo_reward.jsonl: {PPO, GRPO, RLOO} x {sparse, dense} x the pilot's seeds
              (configs/cooking.yaml), RL from the SFT model chosen on the VALIDATION games
              (results/sft_choice.json: the candidate whose validation success is nearest TARGET_SFT_SUCCESS, so RL
              has headroom).
- explore     results/exploration.jsonl: the exploration budget, PPO dense from the main sweep's SFT start with
              max turns 5, 8, 10 and 15 (1x-3x the 5-command walkthrough), 15 steps, seeds 0-1; then each run
              evaluated again greedily and sampling at 0.4, 0.7 and 1.0 (results/exploration_evals.jsonl).
- split       results/sft_rl_split.jsonl: SFT:RL split of one budget (a demonstration costs 10 units, an episode 1;
              the paper's accounting), PPO dense, seeds 0-1, evaluated in-domain and on harder games (2 ingredients).
- complexity  results/complexity.jsonl: SFT + PPO on TextWorld custom games of growing size (the paper's w/o/q
              knobs), seeds 0-1; the w2-o3-q4 policies are also evaluated on the larger levels (transfer_evals).
- evals       results/stage_evals.jsonl: the base and SFT models (no RL) on every held-out set.
- swe         results/swe.jsonl (chapter 06): swe tasks (toolz + boltons, one planted bug each; 32 training tasks,
              8 held-out tasks of other functions at statement levels 1-3), SFT on the 32 walkthroughs, then GRPO
              (configs/swe.yaml) with the paper's pass-ratio reward vs the binary resolved reward, seeds 0-2; the
              base and SFT models on each level into results/stage_evals.jsonl (swe.yaml; SWE_COST: its cost model).
- stability   results/stability.jsonl (chapter 05): RAGEN's bandit (configs/bandit.yaml) from a format-only SFT warm-up,
              the estimators {PPO (GAE), GRPO, RLOO} without filtering, GRPO with StarPO-S filtering (keep 75 / 50 /
              25% of groups), StarPO-S itself (GAE + keep 25%), then Dr. GRPO, REINFORCE++ and GiGPO without
              filtering, seeds 0-2.
- balanced    results/algo_reward_balanced.jsonl (chapters 02-03): the main sweep's cells again on cooking games that
              hold the ingredient as often in the fridge as on the counter (configs/cooking_balanced.yaml), from its
              own RL start; a pilot of every cell's first seeds sets the seeds of the cells that go on.
Every part first makes the game sets it needs (games/, cached) and writes results/game_sets.json: each cooking
game's walkthrough length and ingredient place, in the order `agentrl sft --demos d` takes them.
Nothing here is tuned on held-out games: the only choice (the SFT strength) is made on the validation games.
Each step skips what is done: games are cached, an SFT dir with sft_summary.json is kept, recorded runs are skipped.
Runs go seed-major (every cell's seed 0, then every cell's seed 1, ...), so a regeneration stopped half-way leaves the
cells with equal numbers of seeds, never three seeds of one cell and none of another.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from experiments import ROOT  # the checkout: experiments.checkout_root
from experiments.sweep_plans import load_plans

AGENTRL = [sys.executable, "-m", "agentrl_lib.cli"]
PARTS = ("pilot", "probe", "behaviour", "main", "explore", "split", "complexity", "evals", "stability", "swe",
         "balanced")
"""The parts of the command line (and `all`); each one's plan is configs/sweeps/PART.yaml."""
PLANS = load_plans()
"""Every part's plan, read and checked at import (experiments.sweep_plans): configs/sweeps/PART.yaml, and games.yaml
for the game sets the parts share. The names below are their values as the parts use them (chapters, tests and
book/findings.md's tables import some of them); the why of each value is written beside it in its plan file."""


def make_games_flags(spec: dict) -> list[str]:
    """`agentrl make-games` flags of a game set's plan entry, in the entry's order: {n: 64, seed: 0} -> ["--n", "64",
    "--seed", "0"]."""
    return [x for name, value in spec.items() for x in (f"--{name}", str(value))]


GAMES = {name: make_games_flags(spec) for name, spec in PLANS["games"]["textworld"].items()}
"""name: make-games textworld flags (games.yaml's textworld sets, then each level's training and held-out set); game i
has seed `--seed` + i."""
BALANCED = {name: (s["pool"], s["per_place"]) for name, s in PLANS["games"]["balanced"].items()}
"""name: (pool game set, games per ingredient place) of the balanced sets (games.yaml; balanced_games)."""
BALANCED_PLACES = PLANS["games"]["balanced_places"]
LEVELS = PLANS["games"]["levels"]
"""Complexity levels: name: (world size, objects, quest length)."""
OTHER_GAMES = {name: (s["family"], make_games_flags({"n": s["n"], "seed": s["seed"]}))
               for name, s in PLANS["games"]["other"].items()}
"""name: (family, make-games flags) of the RAGEN families (games are seeds)."""
for _lvl, (_w, _o, _q) in LEVELS.items():
    _knobs = ["--world-size", str(_w), "--nb-objects", str(_o), "--quest-length", str(_q)]
    for _split, _set in PLANS["games"]["level_sets"].items():
        GAMES[f"{_lvl}-{_split}"] = [*_knobs, *make_games_flags(_set)]

SEEDS = PLANS["main"]["seeds_before_pilot"]
"""The main sweep's seeds that a dry run plans before the pilot has set them."""
SFT_LR = 5e-5
"""The SFT learning rate of every SFT model but the candidates of an RL start (1 epoch, batch 4). Kept here, not in a
plan: sft_dir leaves it out of the SFT models' dir names, so another value would reuse the dirs trained at this one."""
SFT_CANDIDATES = PLANS["behaviour"]["candidates"]
"""(walkthroughs, learning rate) tried for the main sweep's RL start, in training order (behaviour.yaml: the rounds)."""
SFT_BAND = (0.35, 0.55)
"""A candidate is usable only inside this band of SAMPLED validation success (BEHAVIOUR_T); with none inside, the
choice stops and names the candidates (add learning rates between the two that bracket the band)."""
TARGET_SFT_SUCCESS = 0.45
"""Sampled validation success aimed at (0.35-0.55): wins and losses inside most groups of 4 from the first rollouts
on (P(a group of 4 all lost) = 0.55^4 = 9% at 45%), and room to improve."""
BEHAVIOUR_T = 0.7
"""configs/cooking.yaml's sampling temperature (TrainConfig.temperature): each SFT candidate plays the validation
games at this temperature, as its first RL rollouts would. The first choice was made on GREEDY validation success,
which overstated what the behaviour policy wins (sft_choice_greedy.json: 47% greedy, 6% sampled), and its pilot's
runs were bimodal (algo_reward_greedy_start.jsonl); the rounds' greedy numbers are kept beside the sampled ones."""
MAIN_CONFIG = PLANS["main"]["config"]
MAIN_CELLS = PLANS["main"]["cells"]
PILOT = {"cells": PLANS["pilot"]["cells"], "seeds": PLANS["pilot"]["seeds"]}
"""Two cells of the main sweep x 2 seeds, run first (pilot.yaml): their spread sets the number of seeds."""
PPO_PROBE = {"cells": PLANS["probe"]["grid"], "seed": PLANS["probe"]["seed"]}
"""The probe's grid (one `agentrl sweep`: 8 runs) and seed (probe.yaml: why configs/cooking.yaml uses lr 1e-5 and
no whitening)."""
PROBE_CONFIG, PROBE_EVAL_GAMES = PLANS["probe"]["config"], PLANS["probe"]["eval_games"]
EXPLORE_CONFIG = PLANS["explore"]["config"]
EXPLORE_CELL = PLANS["explore"]["cell"]
EXPLORE_TURNS = PLANS["explore"]["max_turns"]
EXPLORE_STEPS = PLANS["explore"]["steps"]
EXPLORE_SEEDS = PLANS["explore"]["seeds"]
EXPLORE_EVAL_TEMPERATURES = PLANS["explore"]["eval_temperatures"]
"""Every exploration run is evaluated again on the same held-out games at these temperatures (explore.yaml)."""
MAX_DIFF_HALF_WIDTH = 0.15
"""The pilot sets the number of seeds: the fewest (at least 3, at most MAX_SEEDS) for which the 95% interval of the
difference of two cells' means is at most +-15 points, given the seed-to-seed spread measured in the pilot."""
MAX_SEEDS = PLANS["main"]["max_seeds"]
"""What the CPU budget pays for (main.yaml); if the pilot asks for more, the main sweep runs MAX_SEEDS."""


def seeds_for(spreads: list[list[float]]) -> dict:
    """The number of seeds from the pilot. `spreads`: per pilot cell, its held-out success rates (fractions) over seeds.

    The pooled seed-to-seed standard deviation s (each cell's sample variance, weighted by its degrees of freedom)
    gives the half-width of a 95% interval of the difference of two cells' means over n seeds each,
    t(0.975, 2(n-1)) * s * sqrt(2 / n) (Welch with equal variances; scipy's t quantile). Returns the chosen n (the
    fewest in 3..MAX_SEEDS with a half-width <= MAX_DIFF_HALF_WIDTH, else MAX_SEEDS), s, and the half-width at each n.
    Raises ValueError when no cell has two seeds."""
    from scipy.stats import t

    dfs = [len(x) - 1 for x in spreads if len(x) > 1]
    if not dfs:
        raise ValueError("the pilot needs at least one cell with two seeds")
    mean = [sum(x) / len(x) for x in spreads]
    ss = sum(sum((v - m) ** 2 for v in x) for x, m in zip(spreads, mean) if len(x) > 1)
    sd = (ss / sum(dfs)) ** 0.5
    half = {n: float(t.ppf(0.975, 2 * (n - 1)) * sd * (2 / n) ** 0.5) for n in range(3, MAX_SEEDS + 1)}
    ok = [n for n, h in half.items() if h <= MAX_DIFF_HALF_WIDTH]
    return {"n_seeds": min(ok) if ok else MAX_SEEDS, "pooled_sd": sd, "half_width_by_n": half,
            "met": bool(ok)}


SPLIT_CONFIG = PLANS["split"]["config"]
SPLIT_BUDGET = PLANS["split"]["budget"]
"""Units of the SFT:RL split: demonstrations x SPLIT_UNITS_PER_DEMO + RL episodes (split.yaml)."""
SPLIT_UNITS_PER_DEMO = PLANS["split"]["units_per_demo"]
SPLIT_DEMOS = PLANS["split"]["demos"]
SPLIT_SEEDS = PLANS["split"]["seeds"]
SPLIT_GAMES_PER_STEP = PLANS["split"]["games_per_step"]
"""train.games_per_step of a split run; its episodes a step: this x the config's algo.group_size (base_config)."""
HARD_GAMES, HARD_TURNS = PLANS["split"]["hard_games"], PLANS["split"]["hard_turns"]
COMPLEXITY_CONFIG = PLANS["complexity"]["config"]
COMPLEXITY_SFT = PLANS["complexity"]["sft"]
COMPLEXITY_SEEDS = PLANS["complexity"]["seeds"]
COMPLEXITY_STEPS = PLANS["complexity"]["steps"]
COMPLEXITY_TURNS = PLANS["complexity"]["max_turns"]
"""configs/custom.yaml's env.max_turns: the turns of the transfer evaluations and of the levels' stage evaluations."""
EVALS_TURNS = PLANS["evals"]["heldout_turns"]


def transfer_evals(level: str) -> list[str]:
    """`--also-eval` flags of a complexity run: the policy trained at the smallest level is also evaluated on the
    larger levels' held-out games (record `evals.w4` / `evals.w8`), at the training max turns, for the finding
    "simple environments predict generalisation" (agentrl_lib.findings: trained at w2-o3-q4 vs trained at
    w8-o12-q4, both on the w8-o12-q4 held-out games); [] for the other levels."""
    smallest, *larger = LEVELS
    if level != smallest:
        return []
    return ["--also-eval", *(f"{lvl.split('-')[0]}=games/{lvl}-heldout@{COMPLEXITY_TURNS}" for lvl in larger)]


STABILITY_CONFIG = PLANS["stability"]["config"]
STABILITY_SFT_GAMES = PLANS["stability"]["sft_games"]
STABILITY_SFT = PLANS["stability"]["sft"]
"""Chapter 05's format-only warm-up (stability.yaml: why 4 walkthroughs of each arm order)."""
STABILITY_SEEDS = PLANS["stability"]["seeds"]
STABILITY_SWEEPS = PLANS["stability"]["sweeps"]
"""Grids into results/stability.jsonl, each one `agentrl sweep --grid`; then STABILITY_LAST, then STABILITY_MORE."""
STABILITY_LAST = PLANS["stability"]["last"]
STABILITY_MORE = PLANS["stability"]["more"]
STABILITY_LONG = PLANS["stability"]["long"]
"""The grid of results/stability_long.jsonl (one seed: STABILITY_LONG_SEED)."""
STABILITY_LONG_SEED = PLANS["stability"]["long_seed"]


def read_json(path: Path):
    """The JSON file `path` (a choice file such as sft_choice.json, an evaluation, a manifest); a file cut short or
    not JSON raises records.ResultsFileError naming it (main prints it as one line)."""
    from agentrl_lib.records import ResultsFileError

    try:
        return json.loads(Path(path).read_text())
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError
        raise ResultsFileError(f"{path} is not valid JSON ({str(e)[:80]}): a write cut short or an edit; restore it "
                               "from git, or delete it to make it again") from None


def read_lines(path: Path) -> list[dict]:
    """The JSON lines of a results file through the library's loader (agentrl_lib.records.load_results): [] while it
    does not exist, a torn last line ignored with a warning, any other damaged line refused (ResultsFileError naming
    the file and line)."""
    from agentrl_lib.records import load_results

    return load_results(Path(path))


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(cmd: list[str], name: str) -> None:
    """Run one agentrl command, its output in runs/logs/NAME.log; raise with the log's tail on failure."""
    logs = ROOT / "runs" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log(f"start {name}: {shlex.join(cmd[2:])}")
    t0 = time.perf_counter()
    with open(logs / f"{name}.log", "a") as f:
        rc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=ENV).returncode
    if rc:
        tail = (logs / f"{name}.log").read_text().splitlines()[-5:]
        raise RuntimeError(f"{name} failed (exit {rc}); runs/logs/{name}.log ends:\n  " + "\n  ".join(tail))
    log(f"done  {name} in {time.perf_counter() - t0:.0f}s")


def parallel(jobs: list[tuple[str, list[str]]], n: int) -> list[str]:
    """Run (name, command) jobs, n at a time; returns the names of those that failed (each logged)."""
    failed = []
    if DRY_RUN:
        for name, cmd in jobs:
            minutes, how = estimate_minutes(cmd)
            PLAN.append((name, minutes))
            print(f"{name} [{how}]: {shlex.join(cmd[2:])}")
        return failed

    def one(job):
        try:
            run(job[1], job[0])
        except RuntimeError as e:
            log(str(e))
            failed.append(job[0])

    with ThreadPoolExecutor(max(1, n)) as ex:
        list(ex.map(one, jobs))
    return failed


# The cost model of --dry-run, in minutes on the project's 2-core CPU, fp32 (measured: the findings pilot's PPO run from
# the chosen SFT start, 2-core Xeon shared with tests (load 3-8): 14 steps of 16 episodes in 1361 s, 6.1 s an episode;
# the first design's weak SFT start took 92-140 s a step quiet; an SFT of 16 walkthroughs 86 s; an evaluation of 16
# cooking games 18-21 s). Recorded runs of a results file replace the guess with their median wall time.
SECONDS_PER_EPISODE = {"cooking.yaml": 6.1, "cooking_balanced.yaml": 6.1, "custom.yaml": 7.3, "bandit.yaml": 9.0}
TIMED_LIKE = {"algo_reward_balanced.jsonl": "algo_reward.jsonl"}
"""A results file with no recorded CPU run yet is timed by the median of another's (the same config on other games)."""
SECONDS_PER_DEMO, SECONDS_PER_EVAL_GAME = 5.5, 1.3
PLAN: list[tuple[str, float]] = []


def _flag(cmd: list[str], name: str, default: str = "") -> str:
    return cmd[cmd.index(name) + 1] if name in cmd else default


def estimate_minutes(cmd: list[str]) -> tuple[float, str]:
    """(minutes, how it was estimated) of one agentrl command of the plan: 0 for a sweep run already recorded in its
    results file; the median wall time of the file's recorded CPU runs when there are some; else the cost model."""
    verb = cmd[len(AGENTRL)] if len(cmd) > len(AGENTRL) else ""
    if verb == "sweep":
        out, base = Path(_flag(cmd, "--out")), _flag(cmd, "--base")
        grid = cmd[cmd.index("--grid") + 1:cmd.index("--seeds")]
        seed, init = int(_flag(cmd, "--seeds")), _flag(cmd, "--init").rstrip("/")
        records = read_lines(out)
        axes = [(k, v.split(",")) for k, v in (g.split("=", 1) for g in grid)]
        tags = dict(t.split("=", 1) for t in cmd[cmd.index("--tag") + 1:] if "=" in t and not t.startswith("-")) \
            if "--tag" in cmd else {}

        def same(r, cell) -> bool:
            labels = {k: str(v) for k, v in (r.get("cell") or {}).items()}
            return (r.get("seed") == seed and all(labels.get(k, "").split("/")[-1] == v.split("/")[-1]
                                                  for k, v in {**cell, **tags}.items())
                    and str(r.get("config", {}).get("model", {}).get("name", "")).endswith(init))
        cells = [dict(zip([k for k, _ in axes], vals)) for vals in itertools.product(*[v for _, v in axes])]
        left = [c for c in cells if not any(same(r, c) for r in records)]
        if not left:
            return 0.0, "recorded"
        cell = left[0]
        # a run recorded from its finished run dir has the recording's wall time: its training time is the floor
        cpu = [max(r["wall_seconds"], r.get("train_seconds") or 0.0) for r in records
               if r.get("device") == "cpu" and r.get("wall_seconds")]
        like = ROOT / "results" / TIMED_LIKE.get(out.name, out.name)
        if not cpu and like.exists():
            cpu = [max(r["wall_seconds"], r.get("train_seconds") or 0.0) for r in read_lines(like)
                   if r.get("device") == "cpu" and r.get("wall_seconds")]
        if cpu:
            return len(left) * sorted(cpu)[len(cpu) // 2] / 60, \
                f"{len(left)} run(s) x the median of {len(cpu)} recorded CPU runs"
        import yaml

        conf = yaml.safe_load((ROOT / base).read_text())
        over = {k: float(v) for k, v in cell.items() if k in ("train.steps", "train.games_per_step")}
        steps = over.get("train.steps", conf["train"]["steps"])
        per_step = over.get("train.games_per_step", conf["train"]["games_per_step"]) * conf["algo"]["group_size"]
        n_eval = 64 * (2 if "--also-eval" in cmd else 1)
        return len(left) * (steps * per_step * SECONDS_PER_EPISODE[Path(base).name]
                             + n_eval * SECONDS_PER_EVAL_GAME) / 60, f"{len(left)} run(s), cost model"
    if verb == "sft":
        demos = float(_flag(cmd, "--demos", "64")) * float(_flag(cmd, "--epochs", "1"))
        return (30 + demos * SECONDS_PER_DEMO) / 60, "cost model"
    if verb in ("eval", "make-games"):
        return (64 * SECONDS_PER_EVAL_GAME if verb == "eval" else 90) / 60, "cost model"
    return 0.0, "not estimated"


def games(names) -> list[tuple[str, list[str]]]:
    """make-games jobs for the game sets of `names` (keys of GAMES: textworld, or OTHER_GAMES) not made yet."""
    spec = {**{g: ("textworld", GAMES[g]) for g in GAMES}, **OTHER_GAMES}
    return [(f"games-{g}", [*AGENTRL, "make-games", spec[g][0], "--out", f"games/{g}", *spec[g][1]])
            for g in names if not (ROOT / "games" / g / "manifest.json").exists()]


def write_game_sets() -> dict:
    """results/game_sets.json: the cooking game sets made here, game by game in the manifest's order, with each
    game's walkthrough length and the place of each ingredient its walkthrough takes (records.take_places: `take X
    from PLACE`; `agentrl sft --demos d` takes the first d games' walkthroughs). The chapters count from it what the
    sweeps' models were trained on, e.g. how many training games keep the ingredient in the fridge (chapter 04 §4)."""
    from agentrl_lib.paths import git_commit
    from agentrl_lib.records import take_places

    sets = {}
    made = {**{n: ["textworld", *f] for n, f in GAMES.items() if "tw-cooking" in f and not n.startswith(
        "cooking-pool")}, **{n: ["balanced from", pool, f"{k} per place"] for n, (pool, k) in BALANCED.items()}}
    for name, how in made.items():
        manifest = ROOT / "games" / name / "manifest.json"
        if manifest.exists():
            listed = read_json(manifest)["games"]
            sets[name] = {"make_games": how, "games": [g["name"] for g in listed],
                          "take_places": [take_places(g["walkthrough"]) for g in listed],
                          "walkthrough_len": [len(g["walkthrough"]) for g in listed]}
    if sets:  # one line a set
        body = ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in sets.items())
        (RESULTS / "game_sets.json").write_text(f'{{"commit": {json.dumps(git_commit())}, "sets": {{\n{body}}}}}\n')
    return sets


def balanced_games(name: str) -> dict:
    """Make games/NAME (a key of BALANCED) from its pool, once: the first `per place` games of each of
    BALANCED_PLACES in seed order (the place of a game's ingredient from its walkthrough: records.take_places),
    interleaved, their files copied so the set stands alone; its manifest.json names the pool and the places.
    Returns {place: games taken}. Raises SystemExit when the pool holds too few games of a place (the line says
    which pool's n to raise in configs/sweeps/games.yaml)."""
    import shutil

    from agentrl_lib.envs.base import load_game_set, write_manifest
    from agentrl_lib.records import take_places

    pool_name, per_place = BALANCED[name]
    out = ROOT / "games" / name
    if (out / "manifest.json").exists():
        return {p: per_place for p in BALANCED_PLACES}
    pool = load_game_set(ROOT / "games" / pool_name)
    by_place: dict[str, list] = {p: [] for p in BALANCED_PLACES}
    other = []
    for g in sorted(pool.games, key=lambda g: g.seed):
        place = (take_places(g.walkthrough) or ["none"])[0]
        (by_place[place] if place in by_place else other).append(g)
    short = {p: len(v) for p, v in by_place.items() if len(v) < per_place}
    if short:
        raise SystemExit(f"games/{pool_name} holds too few games of a place for {name} ({per_place} each needed; "
                         f"{', '.join(f'{p}: {n}' for p, n in short.items())}): raise its --n (its n in "
                         "configs/sweeps/games.yaml) and run the same command again")
    if other:
        log(f"{name}: {len(other)} pool game(s) with another ingredient place left out "
            f"({', '.join(sorted({(take_places(g.walkthrough) or ['none'])[0] for g in other}))})")
    chosen = [g for pair in zip(*(by_place[p][:per_place] for p in BALANCED_PLACES)) for g in pair]
    tmp = out.with_name(f".{name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    from dataclasses import replace

    from agentrl_lib.envs.textworld import game_files

    games = []
    for g in chosen:
        for f in game_files(g.path):
            shutil.copy2(f, tmp / f.name)
        games.append(replace(g, path=str(out / Path(g.path).name)))
    params = {"balanced_from": pool_name, "per_place": per_place, "places": list(BALANCED_PLACES),
              "pool_params": pool.params}
    tmp.rename(out)
    write_manifest(out, "textworld", games, params)
    log(f"{name}: {len(chosen)} games from games/{pool_name} ({per_place} per place: {', '.join(BALANCED_PLACES)})")
    return {p: per_place for p in BALANCED_PLACES}


def sft_dir(games_name: str, demos: int, epochs: float, seed: int, lr: float = SFT_LR) -> str:
    lr_part = "" if lr == SFT_LR else f"-lr{lr:g}"
    return f"runs/sft/{games_name}-d{demos}-e{epochs:g}{lr_part}-s{seed}"


def sft(games_name: str, demos: int, epochs: float, seed: int, *more_games: str, lr: float = SFT_LR,
        max_turns: int | None = None) -> list[tuple[str, list[str]]]:
    """The `agentrl sft` job of one SFT model (none when it exists); `more_games`: game sets pooled with the first;
    `max_turns`: the RL runs' env.max_turns (--max-turns: the swe observations state the turn limit, so SFT shows the
    RL runs' prompt)."""
    out = sft_dir("+".join((games_name, *more_games)), demos, epochs, seed, lr)
    if (ROOT / out / "sft_summary.json").exists():
        return []
    more = [x for g in more_games for x in ("--more-games", f"games/{g}")]
    return [(f"sft-{Path(out).name}", [*AGENTRL, "sft", "--games", f"games/{games_name}", *more, "--demos",
                                       str(demos), "--epochs", f"{epochs:g}", "--lr", f"{lr:g}", "--batch-size", "4",
                                       "--seed", str(seed), "--dtype", "float32", "--out", out,
                                       *(["--max-turns", str(max_turns)] if max_turns else [])])]


def stage_eval(model: str, games_name: str, max_turns: int, stage: str, folder: str = "evals",
               **meta) -> list[tuple[str, list[str]]]:
    """`agentrl eval` of a model on a game set, into runs/FOLDER/ (collected by collect_evals(FOLDER)): greedy, or
    sampled when meta has "temperature" (and "sample_seed", the sampling seed); none when done."""
    temp = meta.get("temperature")
    name = f"{stage}-{Path(model).name}-on-{games_name}" + (f"-t{temp:g}" if temp is not None else "")
    out = ROOT / "runs" / folder / f"{name}.json"
    meta_path = out.with_suffix(".meta.json")
    sampling = ["--temperature", f"{temp:g}", "--seed", str(meta.get("sample_seed", 0))] if temp else []
    cmd = [*AGENTRL, "eval", "--model", model, "--games", f"games/{games_name}", "--max-turns", str(max_turns),
           *sampling, "--dtype", "float32", "--out", str(out)]
    if DRY_RUN:
        return [] if out.exists() else [(f"eval-{name}", cmd)]
    meta_path.parent.mkdir(parents=True, exist_ok=True)
    meta_path.write_text(json.dumps({"stage": stage, "model": model, "games": games_name, "max_turns": max_turns,
                                     **meta}))
    return [] if out.exists() else [(f"eval-{name}", cmd)]


def explore_evals() -> list[tuple[str, list[str]]]:
    """The evaluations of EXPLORE_EVAL_TEMPERATURES of every recorded exploration run (RESULTS/exploration.jsonl)
    whose run dir is here, into runs/evals-explore/; a run recorded on another machine (its dir is not here) is
    named and skipped: remove its record and run the part again to retrain it."""
    path = RESULTS / "exploration.jsonl"
    jobs = []
    for r in read_lines(path):
        if not (ROOT / r["run_dir"] / "config.yaml").exists():
            log(f"no run dir {r['run_dir']} here: not evaluated at temperatures {EXPLORE_EVAL_TEMPERATURES}")
            continue
        for temp in EXPLORE_EVAL_TEMPERATURES:
            jobs += stage_eval(r["run_dir"], "cooking-heldout", r["config"]["env"]["max_turns"], "rl",
                               "evals-explore", temperature=temp, sample_seed=0, seed=r["seed"], cell=r["cell"])
    return jobs


def collect_evals(folder: str = "evals") -> int:
    """Append every finished runs/FOLDER/*.json (with its meta) to its results file once. FOLDER "evals": `agentrl
    eval` outputs (stage_eval) into results/stage_evals.jsonl; "evals-swe": the swe part's `agentrl eval
    --max-new-tokens` outputs (swe_stage_eval: their meta name the level and the reply length), there too;
    "evals-explore": the exploration runs at EXPLORE_EVAL_TEMPERATURES (explore_evals) into
    results/exploration_evals.jsonl, each episode's score and actions kept ("episodes", beside the game's
    walkthrough from the game set's manifest.json). Every record has a `seed`: the trained model's, or null for the
    base model (untrained and evaluated greedily, so no seed is involved); a sampled evaluation's own seed is
    "sample_seed"."""
    explore, swe = folder == "evals-explore", folder == "evals-swe"
    path = RESULTS / ("exploration_evals.jsonl" if explore else "stage_evals.jsonl")

    def key(r: dict) -> str:
        return json.dumps([r["stage"], r["model"], r["games"], r.get("temperature")])

    have = set(map(key, read_lines(path)))
    from agentrl_lib.paths import git_commit
    from agentrl_lib.records import append_record, compact_eval, machine_info

    machine, n, walkthroughs = None, 0, {}
    for meta_path in sorted((ROOT / "runs" / folder).glob("*.meta.json")):
        res_path = Path(str(meta_path).replace(".meta.json", ".json"))
        meta = read_json(meta_path)
        if not res_path.exists() or key(meta) in have:
            continue
        machine = machine or machine_info()
        res = read_json(res_path)
        config = {"command": "agentrl eval", "model": meta["model"], "games": f"games/{meta['games']}",
                  "max_turns": meta["max_turns"], "dtype": "float32", "temperature": meta.get("temperature") or 0.0,
                  "max_new_tokens": meta["max_new_tokens"] if swe else 24}
        fields = {k: meta[k] for k in ("stage", "model", "games", "level", "max_turns")} if swe else dict(meta)
        # the SFT model's seed; null for the untrained base model, evaluated greedily: nothing in it is random
        fields["seed"] = None if meta["stage"] == "base" else meta.get("seed", 0)
        ev = {**compact_eval(res), "mean_score_frac": res.get("mean_score_frac")} if swe or explore else \
            compact_eval(res)
        if explore:  # each episode beside its game's walkthrough (the games' manifest): what the policy missed
            if meta["games"] not in walkthroughs:  # one read per game set
                manifest = ROOT / "games" / meta["games"] / "manifest.json"
                walkthroughs[meta["games"]] = {g["name"]: g.get("walkthrough") for g in read_json(
                    manifest)["games"]} if manifest.exists() else {}
            walk = walkthroughs[meta["games"]]
            ev["episodes"] = [{"game": g["game"], "score_frac": g["score"] / g["max_score"] if g.get("max_score")
                               else None, "actions": g.get("actions", []), "walkthrough": walk.get(g["game"])}
                              for g in res.get("per_game", [])]
        append_record(path, {**fields, "config": config, "commit": res.get("commit") or git_commit(),
                             "device": res.get("device") or machine["torch_device"], "machine": machine, "eval": ev})
        n += 1
    return n


def behaviour_success() -> dict:
    """The `behaviour` part: every SFT candidate plays the 32 validation games once at BEHAVIOUR_T (`agentrl eval
    --temperature 0.7 --seed 0`, into runs/evals-sampled/), as the first RL rollouts from it would; writes
    RESULTS/sft_behaviour.json: per candidate the sampled success and invalid-command rate beside the greedy ones of
    the SFT rounds (sft_round*.json). Candidates whose SFT model is missing are (re)made first."""
    out_dir = ROOT / "runs" / "evals-sampled"
    jobs = []
    for d, lr in SFT_CANDIDATES:
        model = sft_dir("cooking-train", d, 1.0, 0, lr)
        out = out_dir / f"sampled-{Path(model).name}-on-cooking-valid.json"
        if not out.exists():
            jobs.append((f"eval-sampled-{Path(model).name}", [
                *AGENTRL, "eval", "--model", model, "--games", "games/cooking-valid", "--max-turns", "8",
                "--temperature", f"{BEHAVIOUR_T:g}", "--seed", "0", "--dtype", "float32", "--out", str(out)]))
    if DRY_RUN:
        return {"jobs": jobs}
    parallel([j for d, lr in SFT_CANDIDATES for j in sft("cooking-train", d, 1.0, 0, lr=lr)], 1)
    out_dir.mkdir(parents=True, exist_ok=True)
    failed = parallel(jobs, 1)
    greedy = {}
    for path in sorted(RESULTS.glob("sft_round*.json")):
        r = read_json(path)
        greedy.update({c: {"success": v, "invalid": r.get("invalid_rate", {}).get(c)}
                       for c, v in r["validation_success"].items()})
    cands = {}
    for d, lr in SFT_CANDIDATES:
        path = out_dir / f"sampled-{Path(sft_dir('cooking-train', d, 1.0, 0, lr)).name}-on-cooking-valid.json"
        if path.exists():
            res = read_json(path)
            cands[candidate_name(d, lr)] = {"sampled_success": res["success_rate"],
                                            "sampled_invalid": res["invalid_rate"],
                                            "greedy_success": greedy.get(candidate_name(d, lr), {}).get("success"),
                                            "greedy_invalid": greedy.get(candidate_name(d, lr), {}).get("invalid")}
    result = {"temperature": BEHAVIOUR_T, "seed": 0, "validation_games": "games/cooking-valid", "max_turns": 8,
              "candidates": cands, "failed": failed}
    (RESULTS / "sft_behaviour.json").write_text(json.dumps(result, indent=1) + "\n")
    log(f"behaviour: sampled validation success at T={BEHAVIOUR_T:g}: "
        f"{ {c: v['sampled_success'] for c, v in cands.items()} } -> {RESULTS / 'sft_behaviour.json'}")
    return result


def choose_by_behaviour(cands: dict) -> str:
    """The RL start chosen on what its first rollouts win: the candidate whose SAMPLED validation success (T =
    BEHAVIOUR_T) is nearest TARGET_SFT_SUCCESS inside SFT_BAND (ties: the smaller learning rate). The greedy choice
    before it (sft_choice.json without "statistic"; its pilot runs were bimodal, book/findings.md) is kept as
    sft_choice_greedy.json; the new choice is sft_choice.json, which every part reads. Returns the chosen dir.

    Raises SystemExit naming the candidates that bracket the band when none is inside it."""
    choice = RESULTS / "sft_choice.json"
    if choice.exists() and read_json(choice).get("statistic") == "sampled":
        return read_json(choice)["chosen"]
    named = {candidate_name(d, lr): (d, lr) for d, lr in SFT_CANDIDATES}
    by = {named[c]: v["sampled_success"] for c, v in cands.items()}
    inside = [c for c in by if SFT_BAND[0] <= by[c] <= SFT_BAND[1]]
    if not inside:
        seen = ", ".join(f"{candidate_name(*c)}: {v:.0%}" for c, v in sorted(by.items(), key=lambda x: x[0][1]))
        raise SystemExit(f"no SFT candidate's sampled validation success is within {SFT_BAND[0]:.0%}-"
                         f"{SFT_BAND[1]:.0%} ({seen}): add learning rates between the two that bracket it to "
                         "the candidates of configs/sweeps/behaviour.yaml")
    best = min(inside, key=lambda c: (abs(by[c] - TARGET_SFT_SUCCESS), c[1], c[0]))
    if choice.exists():
        choice.rename(RESULTS / "sft_choice_greedy.json")
    chosen = sft_dir("cooking-train", best[0], 1.0, 0, best[1])
    choice.write_text(json.dumps({
        "rule": f"sampled validation success (T = {BEHAVIOUR_T:g}, seed 0) nearest {TARGET_SFT_SUCCESS} within "
                f"{SFT_BAND} (ties: smaller lr)", "statistic": "sampled", "inside_band": True,
        "validation_games": "games/cooking-valid",
        "sampled_success": {c: v["sampled_success"] for c, v in cands.items()},
        "validation_success": {c: v["greedy_success"] for c, v in cands.items()},
        "chosen_demos": best[0], "chosen_lr": best[1], "chosen": chosen}, indent=1) + "\n")
    log(f"SFT start by sampled success: {candidate_name(*best)} ({by[best]:.0%} sampled) -> {choice}")
    return chosen


def sweep(base: str, out: str, grid: list[str], seed: int, init: str, *extra: str) -> tuple[str, list[str]]:
    name = (f"{Path(out).stem}-{'-'.join(g.split('=')[-1].replace('/', '.') for g in grid)}-{init.split('/')[-1]}"
            f"-s{seed}")
    return (name, [*AGENTRL, "sweep", "--base", base, "--grid", *grid, "--seeds", str(seed), "--init", init,
                   "--out", out, *extra])


def candidate_name(demos: int, lr: float) -> str:
    return f"{demos}@{lr:g}"


def choose_sft(jobs: int) -> str:
    """The main sweep's SFT start (RESULTS/sft_choice.json, made once): every SFT candidate is trained and played
    greedily on the validation games (runs/evals/sft-candidate-*; the greedy numbers of the rounds' files), then
    sampled at the RL temperature (`behaviour_success`), and the start is the candidate whose SAMPLED validation
    success is nearest TARGET_SFT_SUCCESS inside SFT_BAND (`choose_by_behaviour`)."""
    choice = RESULTS / "sft_choice.json"
    if choice.exists():  # chosen before: (re)make that SFT model if this machine lacks it, and use it
        chosen = read_json(choice)
        parallel(sft("cooking-train", chosen["chosen_demos"], 1.0, 0, lr=chosen.get("chosen_lr", SFT_LR)), jobs)
        return chosen["chosen"]
    if DRY_RUN:
        return sft_dir("cooking-train", *SFT_CANDIDATES[0][:1], 1.0, 0, SFT_CANDIDATES[0][1]) + "-OR-ANOTHER-CANDIDATE"
    parallel([j for d, lr in SFT_CANDIDATES for j in sft("cooking-train", d, 1.0, 0, lr=lr)], jobs)
    parallel([j for d, lr in SFT_CANDIDATES
              for j in stage_eval(sft_dir("cooking-train", d, 1.0, 0, lr), "cooking-valid", 8, "sft-candidate",
                                  demos=d, epochs=1.0, seed=0, lr=lr)], jobs)
    result = behaviour_success()
    if result["failed"] or len(result["candidates"]) < len(SFT_CANDIDATES):
        raise SystemExit(f"the sampled evaluation of {len(result['failed'])} SFT candidate(s) failed "
                         f"({', '.join(result['failed'])}): see runs/logs/, then run the same command again")
    return choose_by_behaviour(result["candidates"])


DESIGN_FIELDS = (("train", "lr"), ("algo", "normalize_advantages"))
"""The settings that PPO_PROBE chose: a pilot record counts only when it has configs/cooking.yaml's values of them."""


def design_settings() -> dict[str, object]:
    """The main sweep's config's (MAIN_CONFIG: configs/cooking.yaml) values of DESIGN_FIELDS, e.g. {'train.lr': 1e-05,
    'algo.normalize_advantages': False} (a field the file leaves out: the config default)."""
    conf = base_config(MAIN_CONFIG)
    return {f"{sec}.{key}": conf[sec][key] for sec, key in DESIGN_FIELDS}


def base_config(path: str) -> dict:
    """The base config `path` (relative to the checkout, e.g. configs/cooking.yaml) as a dict of sections, every
    field the file leaves out at its default (RunConfig.to_dict)."""
    import yaml

    from agentrl_lib.config import RunConfig

    return RunConfig.from_dict(yaml.safe_load((ROOT / path).read_text())).to_dict()


def in_design(record: dict, settings: dict[str, object]) -> bool:
    """Whether a record's config has these settings (design_settings) of the design fields."""
    return all(record["config"].get(sec, {}).get(key) == settings[f"{sec}.{key}"] for sec, key in DESIGN_FIELDS)


def choose_seeds(main_init: str) -> tuple[int, ...]:
    """The main sweep's seeds (0 .. n-1): from RESULTS/seeds_choice.json, else from the pilot's records once all four
    are in RESULTS/algo_reward.jsonl (then written there); SEEDS (3) for a dry run before the pilot."""
    choice = RESULTS / "seeds_choice.json"
    if choice.exists():
        return tuple(range(read_json(choice)["n_seeds"]))
    path = RESULTS / "algo_reward.jsonl"
    records = read_lines(path)
    spreads, table, settings = [], {}, design_settings()
    for cell in PILOT["cells"]:
        labels = dict(c.split("=", 1) for c in cell)
        got = {r["seed"]: r["eval"]["success_rate"] for r in records
               if r["seed"] in PILOT["seeds"] and {k: str(v) for k, v in r["cell"].items()} == labels
               and str(r["config"]["model"]["name"]).rstrip("/").endswith(main_init.rstrip("/"))
               and in_design(r, settings)}
        spreads.append([got[s] for s in sorted(got)])
        table[" ".join(cell)] = got
    if any(len(x) < len(PILOT["seeds"]) for x in spreads):
        if DRY_RUN:
            log(f"the pilot is not finished ({table}): the plan below assumes {len(SEEDS)} seeds")
            return SEEDS
        raise SystemExit(f"the pilot is not finished ({table}): run `python results/regenerate.py pilot` first")
    out = {"rule": f"fewest seeds (3..{MAX_SEEDS}) with a 95% half-width of a two-cell difference <= "
                   f"{MAX_DIFF_HALF_WIDTH}", "pilot_heldout_success": table, **seeds_for(spreads)}
    choice.write_text(json.dumps(out, indent=1) + "\n")
    log(f"seeds: {out['n_seeds']} (pooled seed-to-seed sd {out['pooled_sd']:.3f}; pilot {table})")
    return tuple(range(out["n_seeds"]))


# ---------------------------------------------------------------------------------------------------------------
# the balanced part (chapters 02-03): the algorithm x reward sweep again, on cooking games that hold the ingredient as
# often in the fridge as on the counter (BALANCED), so that no single command wins most training episodes

BALANCED_CONFIG = PLANS["balanced"]["config"]
BAL_SFT_CANDIDATES = PLANS["balanced"]["sft_candidates"]
"""(walkthroughs, learning rate) tried for the balanced sweep's RL start (balanced.yaml; choose_balanced_start)."""
BAL_CELLS = PLANS["balanced"]["cells"]
BAL_PILOT_SEEDS = PLANS["balanced"]["pilot_seeds"]
"""The pilot is the sweep's first seeds of every cell (seed-major): their seed-by-cell table sets the number of
seeds (seeds_for_paired), and they are ordinary records of the sweep."""
BAL_MAX_SEEDS = PLANS["balanced"]["max_seeds"]
BAL_LATER_CELLS = PLANS["balanced"]["later_cells"]
"""The cells that go on past the pilot (balanced.yaml: RLOO's two cells stop at the pilot, a CPU budget)."""


def curve_area(record: dict) -> float:
    """The learning curve's area: mean training success over a run's steps (record["steps"][i]["success_rate"]),
    a fraction. Every step's 16 sampled episodes count, so it is less noisy than one greedy held-out evaluation."""
    rates = [s["success_rate"] for s in record["steps"] if s.get("success_rate") is not None]
    if not rates:
        raise ValueError(f"record of {record.get('run_dir')} has no training success")
    return sum(rates) / len(rates)


def seeds_for_paired(table: dict[str, dict[int, float]], half_width: float = MAX_DIFF_HALF_WIDTH,
                     max_seeds: int = BAL_MAX_SEEDS) -> dict:
    """The number of seeds for a sweep whose cells share seeds (every cell's seed s starts from the same SFT model
    and draws the same first rollouts), from a pilot table {cell: {seed: outcome}} over the seeds every cell has.

    A two-way layout cell x seed: the residual variance s_e^2 = sum (y - row mean - seed mean + grand mean)^2 /
    ((C-1)(S-1)) is the spread left once each seed's shared part is taken out; a paired difference of two cells
    has variance 2 s_e^2, so over n seeds the 95% interval of a mean paired difference has half-width
    t(0.975, n-1) * s_e * sqrt(2 / n). Returns the fewest n in 3..max_seeds with a half-width <= half_width (else
    max_seeds, met False), s_e, the sd of a paired difference, and the half-width at each n.
    Raises ValueError with fewer than 2 cells or 2 common seeds."""
    from scipy.stats import t

    from agentrl_lib.stats import two_way_residual_sd

    got = two_way_residual_sd(table)
    if got is None:
        raise ValueError(f"the pilot needs at least 2 cells with 2 common seeds (got {len(table)} cells)")
    s_e, seeds = got
    cells = sorted(table)
    half = {n: float(t.ppf(0.975, n - 1) * s_e * (2 / n) ** 0.5) for n in range(3, max_seeds + 1)}
    ok = [n for n, h in half.items() if h <= half_width]
    return {"n_seeds": min(ok) if ok else max_seeds, "residual_sd": s_e, "paired_diff_sd": s_e * 2 ** 0.5,
            "half_width_by_n": half, "met": bool(ok), "pilot_seeds": seeds, "cells": cells}


def choose_balanced_start(jobs: int) -> str:
    """The balanced sweep's RL start (RESULTS/sft_choice_balanced.json, made once): every BAL_SFT_CANDIDATES model
    trained on the balanced training walkthroughs and played once on the balanced validation games at BEHAVIOUR_T
    (seed 0), as its first rollouts would; the one nearest TARGET_SFT_SUCCESS inside SFT_BAND (ties: smaller lr).
    Raises SystemExit naming the candidates when none is inside the band, or when an evaluation failed."""
    choice = RESULTS / "sft_choice_balanced.json"
    if choice.exists():
        chosen = read_json(choice)
        parallel(sft("cooking-bal-train", chosen["chosen_demos"], 1.0, 0, lr=chosen["chosen_lr"]), jobs)
        return chosen["chosen"]
    if DRY_RUN:
        for d, lr in BAL_SFT_CANDIDATES:
            parallel(sft("cooking-bal-train", d, 1.0, 0, lr=lr), jobs)
        return sft_dir("cooking-bal-train", 64, 1.0, 0, 7e-6) + "-OR-ANOTHER-CANDIDATE"
    parallel([j for d, lr in BAL_SFT_CANDIDATES for j in sft("cooking-bal-train", d, 1.0, 0, lr=lr)], jobs)
    evals = [j for d, lr in BAL_SFT_CANDIDATES
             for j in stage_eval(sft_dir("cooking-bal-train", d, 1.0, 0, lr), "cooking-bal-valid", 8,
                                 "sft-candidate-balanced", "evals-bal", temperature=BEHAVIOUR_T, sample_seed=0,
                                 demos=d, epochs=1.0, seed=0, lr=lr)]
    if failed := parallel(evals, jobs):
        raise SystemExit(f"the sampled validation evaluation of {', '.join(failed)} failed: see runs/logs/, then run "
                         "the same command again")
    by, invalid = {}, {}
    for d, lr in BAL_SFT_CANDIDATES:
        name = f"sft-candidate-balanced-{Path(sft_dir('cooking-bal-train', d, 1.0, 0, lr)).name}-on-cooking-bal-valid"
        res = read_json(ROOT / "runs" / "evals-bal" / f"{name}-t{BEHAVIOUR_T:g}.json")
        by[(d, lr)], invalid[(d, lr)] = res["success_rate"], res["invalid_rate"]
    inside = [c for c in by if SFT_BAND[0] <= by[c] <= SFT_BAND[1]]
    seen = ", ".join(f"{candidate_name(*c)}: {v:.0%}" for c, v in sorted(by.items(), key=lambda x: x[0][1]))
    if not inside:
        raise SystemExit(f"no balanced SFT candidate's sampled validation success is within {SFT_BAND[0]:.0%}-"
                         f"{SFT_BAND[1]:.0%} ({seen}): add learning rates between the two that bracket it to "
                         "sft_candidates in configs/sweeps/balanced.yaml")
    best = min(inside, key=lambda c: (abs(by[c] - TARGET_SFT_SUCCESS), c[1], c[0]))
    chosen = sft_dir("cooking-bal-train", best[0], 1.0, 0, best[1])
    choice.write_text(json.dumps({
        "rule": f"sampled validation success (T = {BEHAVIOUR_T:g}, seed 0) nearest {TARGET_SFT_SUCCESS} within "
                f"{SFT_BAND} (ties: smaller lr)", "statistic": "sampled", "validation_games": "games/cooking-bal-valid",
        "sampled_success": {candidate_name(*c): v for c, v in by.items()},
        "sampled_invalid": {candidate_name(*c): v for c, v in invalid.items()},
        "chosen_demos": best[0], "chosen_lr": best[1], "chosen": chosen}, indent=1) + "\n")
    log(f"balanced RL start: {candidate_name(*best)} ({by[best]:.0%} sampled; candidates {seen}) -> {choice}")
    return chosen


def choose_balanced_seeds() -> tuple[int, ...]:
    """The balanced sweep's seeds (0 .. n-1): RESULTS/seeds_choice_balanced.json, else from the pilot (every cell's
    seeds BAL_PILOT_SEEDS in RESULTS/algo_reward_balanced.jsonl): seeds_for_paired on the learning-curve area (the
    outcome the rule must resolve to +-15 points), with held-out success's figures beside it. Before the pilot is
    whole: the pilot's seeds."""
    choice = RESULTS / "seeds_choice_balanced.json"
    if choice.exists():
        return tuple(range(read_json(choice)["n_seeds"]))
    path = RESULTS / "algo_reward_balanced.jsonl"
    records = read_lines(path)
    area: dict[str, dict[int, float]] = {}
    heldout: dict[str, dict[int, float]] = {}
    for r in records:
        if r["seed"] in BAL_PILOT_SEEDS:
            key = " ".join(f"{k}={v}" for k, v in sorted(r["cell"].items()))
            area.setdefault(key, {})[r["seed"]] = curve_area(r)
            heldout.setdefault(key, {})[r["seed"]] = r["eval"]["success_rate"]
    if len(area) < len(BAL_CELLS) or any(len(v) < len(BAL_PILOT_SEEDS) for v in area.values()):
        return BAL_PILOT_SEEDS
    by_area, by_heldout = seeds_for_paired(area), seeds_for_paired(heldout)
    run_hours = [max(r.get("wall_seconds") or 0.0, r.get("train_seconds") or 0.0) / 3600 for r in records]
    later = len(BAL_LATER_CELLS) * (by_area["n_seeds"] - len(BAL_PILOT_SEEDS))
    budget = {"pilot_runs": len(run_hours), "pilot_cpu_hours": round(sum(run_hours), 1),
              "median_run_cpu_hours": round(statistics.median(run_hours), 2),
              "all_cells_cpu_hours": round(sum(run_hours) + statistics.median(run_hours) * len(BAL_CELLS) * (
                  by_area["n_seeds"] - len(BAL_PILOT_SEEDS)), 1),
              "later_cells": [" ".join(c) for c in BAL_LATER_CELLS], "later_runs": later,
              "planned_cpu_hours": round(sum(run_hours) + statistics.median(run_hours) * later, 1)}
    out = {"rule": f"fewest seeds (3..{BAL_MAX_SEEDS}) whose paired 95% half-width of a two-cell difference in the "
                   f"learning-curve area is <= {MAX_DIFF_HALF_WIDTH} (seeds_for_paired); past the pilot only "
                   "BAL_LATER_CELLS run", **by_area, "heldout": by_heldout, "budget": budget,
           "pilot_area": area, "pilot_heldout_success": heldout}
    choice.write_text(json.dumps(out, indent=1) + "\n")
    log(f"balanced seeds: {out['n_seeds']} (paired-difference sd of the area {by_area['paired_diff_sd']:.3f}, "
        f"of held-out success {by_heldout['paired_diff_sd']:.3f})")
    return tuple(range(out["n_seeds"]))


def balanced_part(n_jobs: int) -> list[str]:
    """The balanced part: its games (pools, then BALANCED), the RL start chosen on the balanced validation games,
    the base model's and the start's greedy held-out evaluations, the pilot (every cell x BAL_PILOT_SEEDS), the
    seeds rule, then the remaining seeds of BAL_LATER_CELLS, seed-major, into RESULTS/algo_reward_balanced.jsonl.
    Returns the names of the commands that failed."""
    failed = parallel(games([g for g in GAMES if g.startswith("cooking-pool")]), n_jobs)
    if failed:
        return failed
    if not DRY_RUN:
        for name in BALANCED:
            balanced_games(name)
        write_game_sets()
    init = choose_balanced_start(n_jobs)
    out = str(RESULTS / "algo_reward_balanced.jsonl")
    first = len(PLAN)
    # the base model and the RL start, greedily on the balanced held-out games (into stage_evals.jsonl, collected
    # after the pilot): what "GRPO stays near its start" and each cell's change from its start are measured against
    chosen = json.loads((RESULTS / "sft_choice_balanced.json").read_text()) if not DRY_RUN else {}
    starts = [*stage_eval("embedded", "cooking-bal-heldout", 8, "base"),
              *stage_eval(init, "cooking-bal-heldout", 8, "sft", demos=chosen.get("chosen_demos"), epochs=1.0,
                          seed=0, lr=chosen.get("chosen_lr"), balanced_start=True)]
    failed += parallel(starts + [sweep(BALANCED_CONFIG, out, cell, s, init) for s in BAL_PILOT_SEEDS
                                 for cell in BAL_CELLS], n_jobs)
    if not DRY_RUN:  # now, not at the end of the part: the later seeds take hours
        log(f"collected {collect_evals()} new stage evaluations into {RESULTS / 'stage_evals.jsonl'}")
    if failed:
        return failed
    seeds = choose_balanced_seeds() if not DRY_RUN else tuple(range(4))
    failed += parallel([sweep(BALANCED_CONFIG, out, cell, s, init) for s in seeds if s not in BAL_PILOT_SEEDS
                        for cell in BAL_LATER_CELLS], n_jobs)
    if DRY_RUN:
        total = sum(m for _, m in PLAN[first:])
        print(f"balanced part: about {total / 60:.1f} run-hours (each run at 1 thread with --jobs 2 on 2 cores) "
              f"assuming 4 seeds before the pilot sets them (BAL_MAX_SEEDS = {BAL_MAX_SEEDS})")
    return failed


# ---------------------------------------------------------------------------------------------------------------
# the swe part (chapter 06): tasks, SFT on walkthroughs, GRPO with the pass-ratio vs the resolved reward, and the
# base / SFT / RL models on the held-out tasks at each statement level

SWE_CONFIG = PLANS["swe"]["config"]
SWE_PACKAGES = PLANS["swe"]["packages"]
SWE_LEVELS = PLANS["swe"]["levels"]
SWE_GAMES = {"swe-train": make_games_flags(PLANS["swe"]["train_games"]),
             **{f"swe-heldout-l{lvl}": make_games_flags({**PLANS["swe"]["heldout_games"], "level": lvl})
                for lvl in SWE_LEVELS}}
"""name: make-games swe flags; the held-out sets are the same tasks at each statement level (swe.yaml)."""
SWE_SFT = PLANS["swe"]["sft"]
SWE_SEEDS = PLANS["swe"]["seeds"]
SWE_REWARDS = PLANS["swe"]["rewards"]
"""The grid: reward.kind (swe's own kinds; env.swe_reward in records made before issue 50), each seed's kinds before
the next seed."""
SWE_LEVEL_SEEDS = PLANS["swe"]["level_seeds"]
"""Seeds whose RL runs are also evaluated at the levels after the first (--also-eval)."""
SWE_COST = {"task": 2.0, "set": 10.0, "demo": 15.0, "start": 60.0, "eval_turn": 11.0, "rl_turn": 12.0}
"""The swe cost model of --dry-run, seconds, measured in a pilot on the project's 2-core CPU (2026-11-26; CPU
seconds at 1 thread while another training job held both cores, so an upper bound for a quiet machine): a task made
(toolz / boltons: 8 in 15 s), a walkthrough in SFT (8 in 145 CPU-s with the model load), the start of a process
(model load, game check), an episode-turn of greedy evaluation at 160 new tokens (base 281 CPU-s, weak SFT 228 CPU-s
for 4 tasks x 6 turns: both repeat themselves up to the token limit) and of GRPO with its update (430 CPU-s for one
step of 4 episodes x 8 turns). Turn costs scale with train.max_new_tokens / 160. Recorded runs of results/swe.jsonl
replace the guess with their median wall time."""


def swe_settings() -> dict:
    """max_turns, max_new_tokens and the RL episodes per run of configs/swe.yaml."""
    import yaml

    conf = yaml.safe_load((ROOT / SWE_CONFIG).read_text())
    return {"max_turns": conf["env"]["max_turns"], "max_new_tokens": conf["train"]["max_new_tokens"],
            "episodes": conf["train"]["steps"] * conf["train"]["games_per_step"] * conf["algo"]["group_size"]}


def swe_minutes(name: str, cmd: list[str]) -> tuple[float, str]:
    """(minutes, how) of one command of the swe part (SWE_COST; 0 for a run recorded in results/swe.jsonl)."""
    st = swe_settings()
    scale = st["max_new_tokens"] / 160
    turn_eval, turn_rl = SWE_COST["eval_turn"] * scale, SWE_COST["rl_turn"] * scale
    n_heldout = int(_flag(SWE_GAMES["swe-heldout-l1"], "--n"))
    if name.startswith("games-"):
        n = int(_flag(cmd, "--n"))
        return (SWE_COST["set"] + n * SWE_COST["task"]) / 60, "swe cost model"
    if name.startswith("sft-"):
        return (SWE_COST["start"] + float(_flag(cmd, "--demos")) * SWE_COST["demo"]) / 60, "swe cost model"
    if name.startswith("eval-"):
        return (SWE_COST["start"] + n_heldout * st["max_turns"] * turn_eval) / 60, "swe cost model"
    out, seed = Path(_flag(cmd, "--out")), int(_flag(cmd, "--seeds"))
    kind = _flag(cmd, "--grid").split("=", 1)[1]
    records = read_lines(out)
    if any(r.get("seed") == seed and (r.get("cell") or {}).get("reward.kind") == kind for r in records):
        return 0.0, "recorded"
    cpu = sorted(r["wall_seconds"] for r in records if r.get("device") == "cpu" and r.get("wall_seconds"))
    if cpu:
        return cpu[len(cpu) // 2] / 60, f"the median of {len(cpu)} recorded CPU runs"
    levels = 1 + (len(cmd) - cmd.index("--also-eval") - 1 if "--also-eval" in cmd else 0)
    return (SWE_COST["start"] + st["episodes"] * st["max_turns"] * turn_rl
            + levels * n_heldout * st["max_turns"] * turn_eval) / 60, "swe cost model"


def swe_run(jobs: list[tuple[str, list[str]]], n: int) -> list[str]:
    """parallel() with the swe cost model in --dry-run."""
    if not DRY_RUN:
        return parallel(jobs, n)
    for name, cmd in jobs:
        minutes, how = swe_minutes(name, cmd)
        PLAN.append((name, minutes))
        print(f"{name} [{minutes:.0f} min, {how}]: {shlex.join(cmd[2:])}")
    return []


def swe_stage_eval(model: str, games_name: str, stage: str, level: int) -> list[tuple[str, list[str]]]:
    """A greedy `agentrl eval` of a model without RL on a held-out swe set with configs/swe.yaml's turns and tokens
    per turn (--max-turns, --max-new-tokens: eval's default 24 tokens cannot hold a command with a patch), into
    runs/evals-swe/ (collected by collect_evals("evals-swe")); none when done."""
    st = swe_settings()
    name = f"{stage}-{Path(model).name}-on-{games_name}"
    out = ROOT / "runs" / "evals-swe" / f"{name}.json"
    if out.exists():
        return []
    if not DRY_RUN:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".meta.json").write_text(json.dumps({"stage": stage, "model": model, "games": games_name,
                                                             "level": level, **st}))
    return [(f"eval-{name}", [*AGENTRL, "eval", "--model", model, "--games", f"games/{games_name}", "--max-turns",
                              str(st["max_turns"]), "--max-new-tokens", str(st["max_new_tokens"]), "--dtype",
                              "float32", "--reward", "pass_ratio", "--out", str(out)])]


def swe_part(n_jobs: int) -> list[str]:
    """The swe part: games, the SFT model, the base and SFT evaluations per level, then the sweep (seed-major: each
    seed's two reward kinds before the next seed). Returns the names of the commands that failed."""
    first = len(PLAN)
    made = [(f"games-{g}", [*AGENTRL, "make-games", "swe", "--out", f"games/{g}", *flags, "--packages", SWE_PACKAGES])
            for g, flags in SWE_GAMES.items() if not (ROOT / "games" / g / "manifest.json").exists()]
    failed = swe_run(made, n_jobs)
    init = sft_dir("swe-train", SWE_SFT["demos"], SWE_SFT["epochs"], SWE_SFT["seed"])
    failed += swe_run(sft("swe-train", SWE_SFT["demos"], SWE_SFT["epochs"], SWE_SFT["seed"],
                          max_turns=swe_settings()["max_turns"]), n_jobs)
    evals = [j for stage, model in (("base", "embedded"), ("sft", init)) for lvl in SWE_LEVELS
             for j in swe_stage_eval(model, f"swe-heldout-l{lvl}", stage, lvl)]
    runs = [sweep(SWE_CONFIG, str(RESULTS / "swe.jsonl"), [f"reward.kind={kind}"], s, init,
                  *(["--also-eval", *(f"l{lvl}=games/swe-heldout-l{lvl}" for lvl in SWE_LEVELS[1:])]
                    if s in SWE_LEVEL_SEEDS else []))
            for s in SWE_SEEDS for kind in SWE_REWARDS]
    failed += swe_run(evals + runs, n_jobs)
    if DRY_RUN:
        total = sum(m for _, m in PLAN[first:])
        print(f"swe part: about {total / 60:.1f} hours at --jobs 1 on the project's 2-core CPU (SWE_COST: an upper "
              "bound measured at 1 thread on a loaded machine)")
    else:
        log(f"collected {collect_evals('evals-swe')} new swe stage evaluations into results/stage_evals.jsonl")
    return failed


def main() -> None:
    """The command line; a damaged results or choice file (records.ResultsFileError: a line or a JSON file that is
    not what it should be) ends it with one line `regenerate.py: error: ...` naming the file, exit status 2."""
    from agentrl_lib.records import ResultsFileError

    try:
        _main()
    except ResultsFileError as e:
        print(f"regenerate.py: error: {' '.join(str(e).split())}", file=sys.stderr)
        raise SystemExit(2) from None


def _main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("part", choices=["all", *PARTS])
    p.add_argument("--jobs", type=int, default=1,
                   help="commands at once, each with cores // jobs threads (OMP_NUM_THREADS). On a 2-core CPU 2 runs "
                        "at 1 thread each did the same runs faster than 1 at a time at 2 threads, but computed other "
                        "numbers (results/sweep_jobs.jsonl, benchmarks/bench_sweep_jobs.py): keep one --jobs per "
                        "sweep. 7 on a 16-core machine with an 80 GB GPU: one RL run of configs/cooking.yaml holds "
                        "~9.5 GB of GPU memory, 8 at once ran out")
    p.add_argument("--dry-run", action="store_true", help="print the commands that would run; run nothing")
    p.add_argument("--results", default=str(ROOT / "results"),
                   help="folder of the results files (default: this checkout's results/); a sweep run from a pinned "
                        "worktree writes into the main checkout's (the appends are locked)")
    a = p.parse_args()
    if a.jobs < 1:
        p.error(f"--jobs {a.jobs}: run at least 1 command at a time (on a 2-core CPU, 1 or 2)")
    if Path(a.results).exists() and not Path(a.results).is_dir():
        p.error(f"--results {a.results} is a file: pass the folder the results files go in (e.g. results/incoming)")
    global ENV, DRY_RUN, RESULTS
    DRY_RUN = a.dry_run
    RESULTS = Path(a.results).resolve()
    RESULTS.mkdir(parents=True, exist_ok=True)
    ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "TOKENIZERS_PARALLELISM": "false", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
           "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 2) // a.jobs)),
           # threads that wait sleep instead of spinning: beside tests and benchmarks (load 6-7 on 2 cores) the
           # pilot's validation evaluation took 133 s a game against ~1.3 s on a quiet machine; spinning OpenMP
           # threads of oversubscribed processes are one cause of such slowdowns, and PASSIVE costs a quiet run nothing
           "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    parts = ([a.part] if a.part != "all" else
             ["probe", "pilot", "main", "explore", "split", "complexity", "evals", "stability", "swe", "balanced"])
    t0 = time.perf_counter()
    shortcut = [g for g in GAMES if g.startswith("cooking") and not g.startswith("cooking-pool")]
    need = [] if set(parts) <= {"stability", "swe", "balanced"} else shortcut if parts in (["pilot"], ["probe"]) \
        else [g for g in GAMES if not g.startswith("cooking-pool")]
    parallel(games([*need, *(OTHER_GAMES if "stability" in parts else ())]), a.jobs)
    if not DRY_RUN:
        write_game_sets()
        subprocess.run([*AGENTRL[:1], "-c", "from agentrl_lib.model_paths import embedded_model_dir as e; e()"],
                       cwd=ROOT, env=ENV, check=True)  # convert the embedded model once, before parallel jobs load it
    if parts == ["behaviour"]:  # the SFT candidates' sampled validation success (sft_behaviour.json) and the choice
        if DRY_RUN:
            for name, cmd in behaviour_success()["jobs"]:
                print(name, " ".join(cmd))
        else:
            log(f"the RL start: {choose_sft(a.jobs)}")
        return
    main_init = choose_sft(a.jobs) if {"pilot", "probe", "main", "explore", "evals"} & set(parts) else None
    sfts, jobs, evals = [], [], []
    if "probe" in parts:
        jobs.append(sweep(PROBE_CONFIG, str(RESULTS / "ppo_probe.jsonl"), PPO_PROBE["cells"],
                          PPO_PROBE["seed"], main_init, "--eval-games", f"games/{PROBE_EVAL_GAMES}"))
    if "pilot" in parts:
        jobs += [sweep(MAIN_CONFIG, str(RESULTS / "algo_reward.jsonl"), cell, s, main_init)
                 for s in PILOT["seeds"] for cell in PILOT["cells"]]
        if "main" in parts and not DRY_RUN:  # `all`: the main sweep's seeds come from the pilot, so it runs first
            if failed := parallel(jobs, a.jobs):
                raise SystemExit(f"the pilot failed ({', '.join(failed)}): see runs/logs/, then run the same command")
            jobs = []
    seeds = choose_seeds(main_init) if "main" in parts else SEEDS
    if "main" in parts:
        jobs += [sweep(MAIN_CONFIG, str(RESULTS / "algo_reward.jsonl"), cell, s, main_init)
                 for s in seeds for cell in MAIN_CELLS]
    if "explore" in parts:
        jobs += [sweep(EXPLORE_CONFIG, str(RESULTS / "exploration.jsonl"),
                       [f"env.max_turns={','.join(map(str, EXPLORE_TURNS))}", *EXPLORE_CELL,
                        f"train.steps={EXPLORE_STEPS}"], s, main_init) for s in EXPLORE_SEEDS]
    if "split" in parts:
        per_step = SPLIT_GAMES_PER_STEP * base_config(SPLIT_CONFIG)["algo"]["group_size"]  # episodes a step
        for s in SPLIT_SEEDS:
            for d in SPLIT_DEMOS:
                episodes = SPLIT_BUDGET - SPLIT_UNITS_PER_DEMO * d
                sfts += sft("cooking-train", d, 1.0, s)
                grid = [f"train.steps={episodes // per_step}", f"train.games_per_step={SPLIT_GAMES_PER_STEP}"]
                jobs.append(sweep(SPLIT_CONFIG, str(RESULTS / "sft_rl_split.jsonl"), grid,
                                  s, sft_dir("cooking-train", d, 1.0, s), "--tag", f"sft.demos={d}",
                                  f"rl.episodes={episodes}", "--also-eval", f"hard=games/{HARD_GAMES}@{HARD_TURNS}"))
    if "complexity" in parts:
        for s in COMPLEXITY_SEEDS:
            for lvl in LEVELS:
                sfts += sft(f"{lvl}-train", COMPLEXITY_SFT["demos"], COMPLEXITY_SFT["epochs"], s)
                jobs.append(sweep(COMPLEXITY_CONFIG, str(RESULTS / "complexity.jsonl"),
                                  [f"env.games=games/{lvl}-train", f"train.steps={COMPLEXITY_STEPS}"],
                                  s, sft_dir(f"{lvl}-train", COMPLEXITY_SFT["demos"], COMPLEXITY_SFT["epochs"], s),
                                  "--eval-games", f"games/{lvl}-heldout", "--tag", f"level={lvl}",
                                  *transfer_evals(lvl)))
    if "evals" in parts:
        for g, turns in [("cooking-heldout", EVALS_TURNS), (HARD_GAMES, HARD_TURNS)]:
            evals += stage_eval("embedded", g, turns, "base")
            for d in SPLIT_DEMOS:
                evals += stage_eval(sft_dir("cooking-train", d, 1.0, 0), g, turns, "sft", demos=d, epochs=1.0, seed=0)
                sfts += sft("cooking-train", d, 1.0, 0)
            if main_init:
                chosen = read_json(RESULTS / "sft_choice.json") if not DRY_RUN else {}
                evals += stage_eval(main_init, g, turns, "sft", demos=chosen.get("chosen_demos"), epochs=1.0, seed=0,
                                    lr=chosen.get("chosen_lr"), main_start=True)
        for lvl in LEVELS:
            evals += stage_eval("embedded", f"{lvl}-heldout", COMPLEXITY_TURNS, "base", level=lvl)
            for s in COMPLEXITY_SEEDS:
                model = sft_dir(f"{lvl}-train", COMPLEXITY_SFT["demos"], COMPLEXITY_SFT["epochs"], s)
                evals += stage_eval(model, f"{lvl}-heldout", COMPLEXITY_TURNS, "sft", level=lvl, seed=s,
                                    **COMPLEXITY_SFT)
                sfts += sft(f"{lvl}-train", COMPLEXITY_SFT["demos"], COMPLEXITY_SFT["epochs"], s)
    if "stability" in parts:
        first, *more = STABILITY_SFT_GAMES
        sfts += sft(first, STABILITY_SFT["demos"], 1.0, STABILITY_SFT["seed"], *more)
        init = sft_dir("+".join(STABILITY_SFT_GAMES), STABILITY_SFT["demos"], 1.0, STABILITY_SFT["seed"])
        # chapter 05's sweep is committed already (results/): its missing runs complete it there, whatever --results
        jobs += [sweep(STABILITY_CONFIG, str(ROOT / "results" / "stability.jsonl"), grid, s, init)
                 for grids in (STABILITY_SWEEPS, [STABILITY_LAST], [STABILITY_MORE]) for s in STABILITY_SEEDS
                 for grid in grids]
        jobs.append(sweep(STABILITY_CONFIG, str(ROOT / "results" / "stability_long.jsonl"), STABILITY_LONG,
                          STABILITY_LONG_SEED, init))
    failed = parallel(list(dict(sfts).items()), a.jobs)
    failed += parallel(jobs + evals, a.jobs)
    if parts == ["pilot"] and not failed and not DRY_RUN:
        choose_seeds(main_init)
    if "swe" in parts:
        failed += swe_part(a.jobs)
    if "balanced" in parts:
        failed += balanced_part(a.jobs)
    if "explore" in parts:  # the runs recorded by now, at EXPLORE_EVAL_TEMPERATURES
        failed += parallel(explore_evals(), a.jobs)
        if not DRY_RUN:
            log(f"collected {collect_evals('evals-explore')} new evaluations into results/exploration_evals.jsonl")
    if DRY_RUN:
        total = sum(m for _, m in PLAN)
        n = sum(m > 0 for _, m in PLAN)
        print(f"\n{n} commands to run, about {total / 60:.1f} CPU hours at --jobs 1 on a quiet "
              f"2-core CPU (fp32; measured run times where the results files hold some, else the cost model above "
              f"estimate_minutes); a GPU runs a cooking run in 2-7 min (results/algo_reward.jsonl, earlier design)"
              + jobs_speedup_note())
        return
    log(f"collected {collect_evals()} new stage evaluations into results/stage_evals.jsonl")
    log(f"{a.part}: {time.perf_counter() - t0:.0f}s wall" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    sys.exit(1 if failed else 0)


def jobs_speedup_note() -> str:
    """'; at --jobs J ...' from the newest results/sweep_jobs.jsonl line (bench_sweep_jobs.py), '' without one."""
    path = ROOT / "results" / "sweep_jobs.jsonl"
    lines = read_lines(path)
    if not lines:
        return ""
    r = lines[-1]
    threads = max(1, r["cpus"] // r["jobs"])
    return (f"; at --jobs {r['jobs']} ({r['cpus']} cores, {threads} thread(s) a run) the same runs took 1/"
            f"{r['throughput_ratio']:.2f} of that wall time on {r['cpu']} (results/sweep_jobs.jsonl)")


ENV: dict[str, str] = {}
DRY_RUN = False
RESULTS = ROOT / "results"
if __name__ == "__main__":
    main()
