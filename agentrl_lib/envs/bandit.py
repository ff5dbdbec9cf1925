"""Two-armed bandit (RAGEN's Bandit, ../shared/REFERENCE.md §B): one pull, two arms named so that their names hint at
their risk. Families "bandit" and "bandit-reversed"; a game is a seed (EnvFamily.game_id = "seed").

RAGEN's semantics (ragen/env/bandit/config.py and env.py, config/envs.yaml "Bandit"):

    low-risk arm  ("Phoenix"): pays 0.1 for sure                     (lo_arm_score = 0.1)
    high-risk arm ("Dragon"):  pays 1 with p = 0.25, else 0          (hi_arm_hiscore = 1, hi_arm_hiscore_prob = 0.25)

so the high-risk arm is optimal in expectation (0.25 > 0.1). Which arm is listed first is drawn from the seed, as
RAGEN's `_randomize_arms`. "bandit-reversed" swaps the labels (Dragon pays the sure 0.1, Phoenix is the risky arm):
a policy that learnt "pick the dragon" from the names rather than from the payouts fails it.

One-turn episodes: the first reply ends the episode (done), valid or not. The action is an arm name
(case-insensitive); anything else is invalid (info.valid False, no arm pulled, payout 0; RAGEN gives it the format
penalty, here reward.format_penalty). In RAGEN's format the answer holds one arm: `<answer>Dragon</answer>`.

Payout randomness is drawn from (seed, step count), so a replay of a game is reproducible, and the G episodes of a
group on one game see the same draw for the same arm.

Reward kinds (rewards.py): the env reward and the score are the payout (RAGEN's reward); `info.won` is RAGEN's
`success` flag, "pulled the arm that is optimal in expectation" (the high-risk arm), max_score = 1. So
reward.kind = sparse gives 1 for the high-risk arm and 0 for the other; reward.kind = dense gives the payout divided
by max_score with the win topped up to 1: 1 for the high-risk arm, 0.1 for the low-risk one. Neither is RAGEN's
training reward (the raw stochastic payout): the payout is kept in each trajectory's env_rewards and score.
The walkthrough (for SFT and the game check) is the arm optimal in expectation.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from . import EnvFamily, register_family
from .base import reuse_game_set, write_manifest
from .protocol import GameRecord, GameSet, StepInfo, StepResult

LO_ARM_SCORE = 0.1
"""Sure payout of the low-risk arm (RAGEN BanditEnvConfig.lo_arm_score)."""
HI_ARM_PAYOUT = 1.0
"""Payout of the high-risk arm when it pays (RAGEN hi_arm_hiscore); 0 otherwise (hi_arm_loscore)."""
HI_ARM_PROB = 0.25
"""Probability that the high-risk arm pays (RAGEN hi_arm_hiscore_prob)."""
ARMS = {"bandit": ("Phoenix", "Dragon"), "bandit-reversed": ("Dragon", "Phoenix")}
"""Family → (low-risk arm name, high-risk arm name); names as RAGEN's config/envs.yaml "Bandit"."""

INIT_PROMPT = ("You are playing a bandit game. Goal: Maximize your total reward by choosing which arm to pull.\n"
               "Game Rules:\n1. There are 2 arms, named {a} and {b}.\n"
               "2. Each arm has its own reward distribution, related to their names.\n"
               "3. Analyze the symbolic meaning of each arm's name to guess how their reward distribution might "
               "behave.\n4. Based on the symbolic meaning of their names, which arm do you think is more likely to "
               "give higher rewards on average? Choose between {a} and {b}.")
"""First observation (RAGEN's INIT_PROMPT, the answer-format sentence left to the system prompt)."""

SYSTEM_PROMPT = ("You are playing a two-armed bandit. Pull one arm by replying with its name only. "
                 "You get one pull.")


def arm_order(seed: int) -> tuple[bool, np.random.Generator]:
    """Whether the low-risk arm is listed first for this game, and the game's payout generator (seeded by seed)."""
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0]))
    return bool(rng.random() < 0.5), rng


def payout(seed: int, hi_arm: bool, step: int = 0) -> float:
    """Payout of pulling the high-risk (`hi_arm`) or low-risk arm at step `step` of game `seed` (deterministic)."""
    if not hi_arm:
        return LO_ARM_SCORE
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 1, int(step)]))
    return HI_ARM_PAYOUT if rng.random() < HI_ARM_PROB else 0.0


class BanditEnv:
    """One pull of a two-armed bandit. `reversed_labels`: the "bandit-reversed" family (names swapped)."""

    def __init__(self, reversed_labels: bool = False):
        self.lo, self.hi = ARMS["bandit-reversed" if reversed_labels else "bandit"]
        self.seed = 0
        self.steps = 0
        self.done = True

    def reset(self, game: str) -> StepResult:
        """Start game `game` (a seed, e.g. "17"). Raises ValueError when `game` is not an integer."""
        self.seed, self.steps, self.done = int(game), 0, False
        lo_first, _ = arm_order(self.seed)
        a, b = (self.lo, self.hi) if lo_first else (self.hi, self.lo)
        self.names = [a, b]
        return StepResult(INIT_PROMPT.format(a=a, b=b), 0.0, False, self._info(0.0, False, True))

    def _info(self, score: float, won: bool, valid: bool) -> StepInfo:
        return StepInfo(won=won, lost=self.done and not won, score=score, max_score=HI_ARM_PAYOUT,
                        admissible=[] if self.done else list(self.names), valid=valid,
                        expert_action=None if self.done else self.hi,
                        objective="Pull the arm with the higher expected reward.")

    def step(self, action: str) -> StepResult:
        """Pull the arm named by `action` ("Dragon", case-insensitive; in RAGEN's format a "||"-joined list, whose
        first name is pulled and which is valid only when it names one arm). Ends the episode."""
        if self.done:
            return StepResult("The game is over.", 0.0, True, self._info(0.0, False, False))
        moves = [m.strip().lower() for m in action.split("||") if m.strip()]
        by_name = {n.lower(): n for n in self.names}
        arm = by_name.get(moves[0]) if moves else None
        valid = arm is not None and len(moves) == 1
        self.steps += 1
        self.done = True
        if arm is None:
            return StepResult(f"Invalid answer {action.strip()[:40]!r}: reply with {self.names[0]} or "
                              f"{self.names[1]}. No arm was pulled.", 0.0, True, self._info(0.0, False, False))
        r = payout(self.seed, arm == self.hi, self.steps - 1)
        return StepResult(f"{arm}: {r:g} points", r, True, self._info(r, arm == self.hi, valid))

    def close(self) -> None:
        pass


def make_bandit_env() -> BanditEnv:
    return BanditEnv(reversed_labels=False)


def make_reversed_env() -> BanditEnv:
    return BanditEnv(reversed_labels=True)


def _maker(family: str):
    def make_games(out, n: int, seed: int = 0, force: bool = False) -> GameSet:
        """Write `n` bandit games (seeds seed … seed+n-1) to out/manifest.json; walkthrough = the high-risk arm."""
        out = Path(out)
        params = {"n": n, "seed": seed}
        if (old := reuse_game_set(out, family, params, force)) is not None:
            return old
        out.mkdir(parents=True, exist_ok=True)
        hi = ARMS[family][1]
        games = [GameRecord(path=str(s), name=f"{family}-{s}", seed=s, max_score=HI_ARM_PAYOUT, walkthrough=[hi])
                 for s in range(seed, seed + n)]
        write_manifest(out, family, games, params)
        from .base import load_game_set
        return load_game_set(out)
    make_games.__name__ = f"make_{family.replace('-', '_')}_games"
    return make_games


make_bandit_games = _maker("bandit")
make_reversed_games = _maker("bandit-reversed")

register_family(EnvFamily(name="bandit", make_env=make_bandit_env, make_games=make_bandit_games,
                          system_prompt=SYSTEM_PROMPT, game_id="seed"))
register_family(EnvFamily(name="bandit-reversed", make_env=make_reversed_env, make_games=make_reversed_games,
                          system_prompt=SYSTEM_PROMPT, game_id="seed"))
