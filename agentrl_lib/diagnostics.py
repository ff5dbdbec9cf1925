"""Echo-Trap diagnostics, a collapse detector and a divergence guard over the stream of training metrics rows (pure
Python, no torch).

RAGEN (Wang et al. 2025, arXiv 2504.20073, §4 "Echo Trap"; ../shared/REFERENCE.md §B) found that multi-turn agent RL
collapses in a recognisable order: the within-group reward spread shrinks *before* the reward falls, gradient-norm
spikes mark collapses that do not recover, and the replies turn repetitive and templated. RAGEN-2 adds that the
replies stop depending on the input. This module gives

- two per-step signals computed from the step's trajectories (the trainer logs them, agentrl_lib/metrics.py declares
  them): `repetition_rate` (episodes repeating themselves) and `input_dependence` (replies that still depend on the
  game);
- `CollapseDetector`: fed one metrics row per step (`update(row) -> list[Alert]`), it raises an alert once per
  episode of each of three signatures: (a) `reward_std_collapse`, (b) `grad_norm_spike`, (c) `invalid_rising` /
  `repetition_rising`. Its thresholds are constructor parameters whose defaults were chosen on the 7 real runs of
  results/algo_reward_first_design.jsonl (5 collapsed, 2 took off; tests/test_diagnostics.py replays them);
- `alerts_markdown(run_dir | rows | record)`: the alerts of a run as a Markdown table for a notebook;
- `collapse_step(run_dir | metrics.jsonl | rows | record)`: the step of the run's first reward_std_collapse alert,
  or None: what "collapsed" means everywhere (the notebooks, results/findings.py).
- `DivergenceGuard`: fed the same rows, it counts the steps in a row with a NaN/inf loss, gradient or metric and
  stops the run after train.max_nonfinite_steps of them (DivergenceError: the last checkpoint, the resume command).

Where alerts go: Trainer.train feeds every row to a CollapseDetector and stores the alerts it raises in that row's
`alerts` key (a list of Alert.to_dict(); [] on a quiet step) before the row reaches metrics.jsonl, and logs each one
as a warning. A resumed run replays the kept rows into a fresh detector first, so the alerts of a step are the same
whether the run was interrupted or not. With train.stop_on_collapse an alert of a kind in train.stop_kinds (default:
reward_std_collapse) stops the run after the step's checkpoint (CollapseError, one line, resumable).

Introduced in notebooks/05_stability.md.
"""
from __future__ import annotations

import json
import logging
import math
import re
import statistics
from collections import deque
from dataclasses import asdict, dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Iterable

from .config_values import ConfigError

KINDS = {
    "reward_std_collapse": "within-group return std near 0 for a window of steps while success has not converged",
    "grad_norm_spike": "grad_norm above spike_factor × its running median",
    "invalid_rising": "invalid-action rate rising over a window",
    "repetition_rising": "repetition rate rising over a window",
}
"""Alert kinds and what each means."""


def stopping_kinds(stop_on_collapse: bool, stop_kinds: str) -> frozenset[str]:
    """The alert kinds that stop a run: train.stop_kinds (alert kinds joined by commas, or 'all') when
    train.stop_on_collapse is on, else none. Checked here, where the names are looked up, not by the config.

    Raises: ConfigError naming train.stop_kinds, its unknown names and the KINDS to choose from."""
    names = {k.strip() for k in str(stop_kinds).split(",") if k.strip()}
    if not names or not names <= {*KINDS, "all"}:
        unknown = f"; unknown: {', '.join(sorted(names - {*KINDS, 'all'}))}" if names else ""
        raise ConfigError(f"train.stop_kinds (--stop-kinds) must be 'all' or alert kinds joined by commas, from "
                          f"{', '.join(KINDS)} (got {stop_kinds!r}{unknown}); e.g. "
                          "reward_std_collapse,grad_norm_spike. To never stop, turn train.stop_on_collapse off")
    if not stop_on_collapse:
        return frozenset()
    return frozenset(KINDS) if "all" in names else frozenset(names)

log = logging.getLogger(__name__)


class CollapseError(ValueError):
    """train.stop_on_collapse is on and the collapse detector raised an alert of train.stop_kinds; the run stopped
    after checkpointing."""


@dataclass(frozen=True)
class Alert:
    """One alert of the collapse detector."""

    step: int
    """The RL step (metrics row `step`) at which the signature became visible."""
    kind: str
    """One of KINDS."""
    message: str
    """One line: what was seen, with numbers, and what to try."""
    evidence: dict = field(default_factory=dict)
    """The values the rule looked at (window means, thresholds, the steps involved)."""

    def to_dict(self) -> dict:
        return asdict(self)


# ------------------------------------------------------------------------------------ per-step signals
_TOKEN = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def token_set(text: str) -> frozenset[str]:
    """The set of lowercase word and punctuation tokens of `text` ("Go north!!" → {'go', 'north', '!'})."""
    return frozenset(_TOKEN.findall(text.lower()))


def jaccard(a: frozenset, b: frozenset) -> float:
    """|a ∩ b| / |a ∪ b| in [0, 1]; 1 when both are empty (two empty replies are alike)."""
    union = len(a | b)
    return 1.0 if union == 0 else len(a & b) / union


def repetition_rate(episodes: Iterable[tuple[list[str], list[str]]]) -> float | None:
    """Share of turns that repeat an earlier action or an earlier reply of the same episode.

        repetition_rate = Σ_episodes #{turns k : action_k ∈ {action_j : j<k} or reply_k ∈ {reply_j : j<k}}
                          / Σ_episodes turns

    Texts are compared after lowercasing and collapsing whitespace; an empty action (unparseable reply) counts as
    a repeat only through its reply. A first turn never repeats, so a run of one-turn episodes logs 0.

    Args:
        episodes: (actions, replies) per episode, as Trajectory.actions and Trajectory.replies (equal lengths).
    Returns: a fraction in [0, 1), or None when there are no turns.
    Source: RAGEN §4 (the Echo Trap's "repetitive, templated" replies); issue 13's definition.
    """
    turns = repeats = 0
    for actions, replies in episodes:
        seen_a: set[str] = set()
        seen_r: set[str] = set()
        for k in range(max(len(actions), len(replies))):
            a = _norm(actions[k]) if k < len(actions) else ""
            r = _norm(replies[k]) if k < len(replies) else ""
            turns += 1
            repeats += bool((a and a in seen_a) or r in seen_r)
            if a:
                seen_a.add(a)
            seen_r.add(r)
    return repeats / turns if turns else None


def input_dependence(replies: list, games: list) -> float | None:
    """How much the replies depend on the game: the mean token-set Jaccard similarity of replies at the same turn of
    episodes of the same game minus that of episodes of different games,

        input_dependence = mean_{(i<j,k): g_i = g_j} J(y_ik, y_jk) − mean_{(i<j,k): g_i ≠ g_j} J(y_ik, y_jk) ∈ [−1, 1],

    over every pair of episodes i < j and every turn k both reached; y_ik is episode i's reply at turn k and J the
    Jaccard similarity of the token sets (`token_set`). Replies that ignore the game score ≈ 0 whether they are all
    alike (the Echo Trap's template: both means ≈ 1) or all random (both ≈ 0); replies consistent within a game and
    different across games score up to 1. A cheap stand-in for the mutual information I(game; reply) that RAGEN-2
    tracks: a similarity excess within games instead of an entropy gap. All turns are used, not only the first:
    in some families the right first move is the same in every game (every cooking game's walkthrough starts with
    `inventory`), so first replies alone read 0 for a policy that plays each game well.

    Args:
        replies: per episode, its list of reply texts (Trajectory.replies); a plain string is a one-turn episode.
        games: the episode's game (any hashable), same length.
    Returns: the difference above, or None when there is no pair of the same game or none of different games
        (one game per step, or one episode per game).
    Raises: ValueError when the lengths differ.
    Cost: O(episodes² × turns) Jaccard similarities (64 episodes × 8 turns: tens of ms).
    """
    if len(replies) != len(games):
        raise ValueError(f"input_dependence: {len(replies)} replies but {len(games)} games")
    sets = [[token_set(r)] if isinstance(r, str) else [token_set(x) for x in r] for r in replies]
    same = [0.0, 0]
    diff = [0.0, 0]
    for i, j in combinations(range(len(sets)), 2):
        acc = same if games[i] == games[j] else diff
        for a, b in zip(sets[i], sets[j]):
            acc[0] += jaccard(a, b)
            acc[1] += 1
    if not same[1] or not diff[1]:
        return None
    return same[0] / same[1] - diff[0] / diff[1]


# ------------------------------------------------------------------------------------ the detector
def _num(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


class CollapseDetector:
    """Watches a stream of metrics rows (metrics.METRICS keys; a sweep record's "steps" rows work too) and raises
    an Alert when an Echo-Trap signature appears, once per episode of the condition (it re-arms only after the
    condition has cleared).

    (a) reward_std_collapse: each of the last `window` steps has group_return_std ≤ `std_floor` (or, when that key
        is missing, zero_std_group_frac ≥ 1), while mean success_rate over those steps < `converged_success`. A run
        that has converged (every episode wins, so every group ties) is not collapsing. Success rather than the
        return decides convergence: in the real collapsed runs the return sat at its maximum so far (0: the policy
        had learned only to avoid the −0.1 format penalty) while no episode won.
    (b) grad_norm_spike: grad_norm > `spike_factor` × median of the previous `spike_history` grad norms, once at
        least `spike_min_history` are known (steps that made no update, skipped_update = 1, are ignored).
    (c) invalid_rising / repetition_rising: mean of invalid_rate (repetition_rate) over the last `window` steps
        ≥ `rise_by` above the lowest mean of any earlier, non-overlapping `window`-step span, and ≥ `rise_level`.

    Defaults, from results/algo_reward_first_design.jsonl (7 real 25-step runs; tests/test_diagnostics.py replays them):
    window 5 = the collapse rule of notebooks/03_policy.md; std_floor 0.05: one episode of a group losing the −0.1
    format penalty gives a within-group std ≤ 0.05 (group of 4: 0.043), the collapsed runs' blips were ≤ 0.043 and
    the two that took off had at most 4 steps in a row under it (so window 5 is a thin margin: their groups often
    tie too); converged_success 0.9: the runs that took off trained at 0.75-1.0; spike_factor 5: the demo run's grad
    norms had max/median 3.3, RAGEN's spikes are larger; rise_by 0.3, rise_level 0.5: in window means the runs that
    took off rose ≤ 0.1 above an earlier low, ppo sparse s2's invalid-action collapse rose by 1.0.

    Args:
        check_convergence: False drops the convergence test of (a) (the negative control: it then fires on a run
            that converged at success 1).
    Raises: ValueError on a non-positive window or factor.
    Source: RAGEN §4 (Echo Trap: reward std, gradient-norm spikes, repetition); StarPO-S as the remedy.
    """

    def __init__(self, window: int = 5, std_floor: float = 0.05, converged_success: float = 0.9,
                 spike_factor: float = 5.0, spike_history: int = 20, spike_min_history: int = 5,
                 rise_by: float = 0.3, rise_level: float = 0.5, check_convergence: bool = True):
        if window < 1 or spike_history < 1 or spike_min_history < 1:
            raise ValueError("CollapseDetector: window, spike_history and spike_min_history must be >= 1")
        if spike_factor <= 1 or std_floor < 0 or rise_by <= 0:
            raise ValueError("CollapseDetector: spike_factor must be > 1, std_floor >= 0 and rise_by > 0")
        self.window, self.std_floor, self.converged_success = window, std_floor, converged_success
        self.spike_factor, self.spike_min_history, self.rise_by, self.rise_level = (spike_factor, spike_min_history,
                                                                                    rise_by, rise_level)
        self.check_convergence = check_convergence
        self._flat: deque[tuple[int, float, float | None]] = deque(maxlen=window)  # (step, std, success)
        self._peak_std: tuple[float, int] = (0.0, 0)
        self._grads: deque[float] = deque(maxlen=spike_history)
        self._rates: dict[str, list[float]] = {"invalid_rate": [], "repetition_rate": []}
        self._base: dict[str, float] = {}
        self._active: dict[str, bool] = {k: False for k in KINDS}
        self.alerts: list[Alert] = []

    def _edge(self, kind: str, on: bool) -> bool:
        """True on the step a condition switches on (fire once per episode of it)."""
        fire = on and not self._active[kind]
        self._active[kind] = on
        return fire

    def update(self, row: dict) -> list[Alert]:
        """Feed the metrics row of the next step; returns the alerts it raises (usually [])."""
        step = int(row.get("step") or 0)
        out = [a for a in (self._std_collapse(step, row), self._spike(step, row),
                           self._rising(step, row, "invalid_rate", "invalid_rising"),
                           self._rising(step, row, "repetition_rate", "repetition_rising")) if a]
        self.alerts.extend(out)
        return out

    def replay(self, rows: Iterable[dict]) -> list[Alert]:
        """Feed every row in order; returns all alerts raised."""
        return [a for r in rows for a in self.update(r)]

    # (a)
    def _std_collapse(self, step: int, row: dict) -> Alert | None:
        std, zero = _num(row.get("group_return_std")), _num(row.get("zero_std_group_frac"))
        if std is None and zero is None:
            return None  # no rollout statistics this step (e.g. every episode failed): the window waits
        if std is not None and std > self._peak_std[0]:
            self._peak_std = (std, step)
        flat = std <= self.std_floor if std is not None else zero >= 1.0
        if not flat:
            self._flat.clear()
            self._edge("reward_std_collapse", False)
            return None
        self._flat.append((step, std if std is not None else 0.0, _num(row.get("success_rate"))))
        if len(self._flat) < self.window:
            return None
        succ = [s for _, _, s in self._flat if s is not None]
        success = sum(succ) / len(succ) if succ else 0.0
        converged = self.check_convergence and success >= self.converged_success
        if not self._edge("reward_std_collapse", not converged):
            return None
        first = self._flat[0][0]
        peak, peak_step = self._peak_std
        return Alert(step, "reward_std_collapse",
                     f"step {step}: reward-variance collapse (Echo Trap): within-group return std "
                     f"<= {self.std_floor:g} for {self.window} steps ({first}-{step}; peak {peak:.3g} at step "
                     f"{peak_step}) while training "
                     f"success is {success:.2f} < {self.converged_success:g}: groups tie, so group baselines give no "
                     "signal; try StarPO-S filtering (--keep-top-std 0.5), a higher --temperature or more SFT first",
                     {"first_step": first, "std_max_in_window": max(s for _, s, _ in self._flat),
                      "success_mean": success, "std_floor": self.std_floor, "peak_std": peak, "peak_step": peak_step})

    # (b)
    def _spike(self, step: int, row: dict) -> Alert | None:
        g = row.get("grad_norm")
        if row.get("skipped_update") == 1 or g is None or isinstance(g, bool) or not isinstance(g, (int, float)):
            return None
        g = float(g)
        spike = False
        med = statistics.median(self._grads) if self._grads else None
        if med is not None and len(self._grads) >= self.spike_min_history:
            spike = not math.isfinite(g) or g > self.spike_factor * med
        if math.isfinite(g):
            self._grads.append(g)
        if not self._edge("grad_norm_spike", spike):
            return None
        return Alert(step, "grad_norm_spike",
                     f"step {step}: grad-norm spike: {g:.3g} > {self.spike_factor:g} x running median {med:.3g}; "
                     "RAGEN saw such spikes mark collapses that do not recover: watch success and the group std, "
                     "consider a lower --lr, or stopping on it (--stop-on-collapse --stop-kinds all)",
                     {"grad_norm": g, "median": med, "spike_factor": self.spike_factor})

    # (c)
    def _rising(self, step: int, row: dict, key: str, kind: str) -> Alert | None:
        v = _num(row.get(key))
        if v is None:
            return None
        vals, w = self._rates[key], self.window
        vals.append(v)
        if len(vals) > 2 * w:  # only the last 2 windows are needed; the running min keeps the older spans
            del vals[0]
        if len(vals) < 2 * w:
            return None
        recent = sum(vals[-w:]) / w
        # the lowest mean of the spans that end before the recent one starts (running min: O(window) per step)
        self._base[key] = min(self._base.get(key, math.inf), sum(vals[-2 * w:-w]) / w)
        base = self._base[key]
        on = recent - base >= self.rise_by and recent >= self.rise_level
        if not self._edge(kind, on):
            return None
        what = "invalid-action rate" if key == "invalid_rate" else "repetition rate"
        hint = ("the policy drifts away from valid actions; check the reply format, lower --lr" if key == "invalid_rate"
                else "replies repeat themselves (Echo Trap); try StarPO-S filtering or an entropy bonus")
        return Alert(step, kind, f"step {step}: {what} rising: mean {recent:.2f} over steps {step - w + 1}-{step}, "
                                 f"up from a low of {base:.2f}; {hint}",
                     {"recent_mean": recent, "baseline_min": base, "rise_by": self.rise_by, "key": key})


def detect(rows_or_record, **kwargs) -> list[Alert]:
    """Replay a run's metrics rows (a list of rows, or a sweep record with "steps") through
    CollapseDetector(**kwargs); returns the alerts."""
    rows = rows_or_record.get("steps", []) if isinstance(rows_or_record, dict) else rows_or_record
    return CollapseDetector(**kwargs).replay(rows)


def read_alerts(source) -> list[dict]:
    """The alerts logged by a run: `source` is a run directory (its metrics.jsonl), a metrics.jsonl file, a list of
    metrics rows or a sweep record; the rows' `alerts` lists, in step order. A record or rows without logged alerts
    (written before the detector existed) are replayed through a default CollapseDetector instead."""
    if isinstance(source, (str, Path)):
        path = Path(source) if Path(source).is_file() else Path(source) / "metrics.jsonl"
        rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []
    else:
        rows = source.get("steps", []) if isinstance(source, dict) else list(source)
    if rows and not any("alerts" in r for r in rows):
        return [a.to_dict() for a in detect(rows)]
    return [a for r in rows for a in (r.get("alerts") or [])]


def collapse_step(source) -> int | None:
    """The step at which a run collapsed, or None: the step of its first `reward_std_collapse` alert (the detector's
    rule (a): within-group return std at most 0.05 for 5 consecutive steps while training success is below 0.9).
    The library's one definition of a collapse; `source` as read_alerts: a run directory, its metrics.jsonl, metrics
    rows or a sweep record (records written before the detector existed are replayed through it)."""
    return next((a["step"] for a in read_alerts(source) if a["kind"] == "reward_std_collapse"), None)


def alerts_markdown(source) -> str:
    """The alerts of a run (see read_alerts) as a Markdown table: step, kind, message; a line saying there were
    none otherwise. In a notebook: `display(Markdown(alerts_markdown(run_dir)))`."""
    alerts = read_alerts(source)
    if not alerts:
        return "No collapse alerts: no Echo-Trap signature was detected in this run."
    lines = ["| step | kind | message |", "|---|---|---|"]
    for a in alerts:
        lines.append(f"| {a['step']} | `{a['kind']}` | {a['message'].replace('|', chr(92) + '|')} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ divergence
class DivergenceError(ValueError):
    """Training produced non-finite losses or gradients for train.max_nonfinite_steps steps in a row."""


def is_finite_row(row: dict) -> bool:
    """True if every numeric metric is finite (NaN allowed only for metrics that are undefined this step)."""
    allowed_nan = {"explained_variance", "entropy"}
    return all(math.isfinite(v) or k in allowed_nan for k, v in row.items() if isinstance(v, float))


class DivergenceGuard:
    """Counts the steps in a row whose update skipped a non-finite minibatch (`nonfinite_updates` > 0) or whose
    metrics are not finite (is_finite_row); `streak` holds their step numbers ([] after a finite step). Trainer.train
    feeds it every row, and writes no periodic checkpoint while a streak lasts (the last one holds finite weights)."""

    def __init__(self, max_steps: int):
        self.max_steps = max_steps
        """train.max_nonfinite_steps: the streak that stops the run."""
        self.streak: list[int] = []

    def update(self, row: dict, lr: float, last_checkpoint: str | None, run_dir) -> None:
        """Take the next metrics row: a bad step is logged (one warning naming the non-finite metrics).

        Raises:
            DivergenceError: the streak reached max_steps; the message names the steps, `lr`, the last checkpoint
                and the command that resumes it with lr / 10.
        """
        if not row.get("nonfinite_updates") and is_finite_row(row):  # None: no update ran
            self.streak = []
            return
        self.streak.append(row["step"])
        bad = [k for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)
               and k not in ("entropy", "explained_variance")]
        log.warning("step %d: non-finite loss or gradient (%s); %s update(s) skipped, weights unchanged by them",
                    row["step"], ", ".join(bad) or "nan", row.get("nonfinite_updates", "no"))
        k = self.max_steps
        if len(self.streak) >= k:
            raise DivergenceError(
                f"training diverged: {k} step(s) in a row ({self.streak[0]}-{self.streak[-1]}) had a NaN/inf loss or "
                f"gradient at lr {lr:g}. The last checkpoint is {last_checkpoint or 'none (resume starts over)'}; "
                f"resume it with a lower learning rate: agentrl train --out {run_dir} --resume --lr {lr / 10:g}")
