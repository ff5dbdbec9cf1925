"""FrozenLake (RAGEN's FrozenLake, ../shared/REFERENCE.md §B) on gymnasium's FrozenLake engine. Family "frozenlake";
a game is a seed (EnvFamily.game_id = "seed").

A game: a 4×4 map drawn from the seed as RAGEN's `generate_random_map` (ragen/env/frozen_lake/utils.py): each cell
frozen with p = 0.8 else a hole, start and goal at random distinct cells, redrawn until the goal is reachable from the
start (checked by BFS here). gymnasium's `FrozenLakeEnv(desc=map, is_slippery=True)` plays it: slippery as RAGEN's
default (FrozenLakeEnvConfig.is_slippery = True), i.e. gymnasium's rule, the intended move with probability 1/3 and
each perpendicular move with 1/3. The ice's randomness is drawn from (seed, move count): a replay of the same moves
slips the same way, and the G episodes of a group on one game share the draws.

Rendered as RAGEN's text grid (FrozenLakeEnvConfig.grid_lookup): P player, _ frozen ice, O hole, G goal,
X player in a hole, √ player on the goal; the legend is in the system prompt and the objective.
Actions: Left, Down, Right, Up (case-insensitive; RAGEN's action_lookup). One turn may carry several moves joined
by "||" (RAGEN's answer format, prompts.parse_reply caps them at env.max_actions_per_turn): they are made in order,
moves that are not one of the four are skipped, and the turn stops when the episode ends; the turn's reward is the
sum. info.valid is False when any move of the turn was not one of the four, or there was none (→ format penalty).

Reward (RAGEN / gymnasium): 1 on reaching the goal, 0 otherwise; falling into a hole ends the episode (lost).
score ∈ {0, 1}, max_score = 1, so reward.kind dense and sparse give the same rewards on this family.
An episode also ends after `max_steps` moves (100, gymnasium's TimeLimit for 4×4); max_turns 5-10 suits it (RAGEN:
at most 10 actions per episode, 5 turns).

Walkthrough: the moves that win this seed's ice along a shortest path of the map without ice (BFS). On slippery ice
an intended move slips 2 times in 3, so each move of the walkthrough is the one whose slip this seed realises in
the intended direction: it wins the game (the game check and SFT replay it), but its actions look random against the
map. `GameRecord.params["plan"]` holds the intended directions (the non-slippery shortest path), which win only a
fraction of slippery replays. info.expert_action is the plan's next direction from the current cell.
"""
from __future__ import annotations

from collections import deque
from pathlib import Path

import numpy as np

from . import EnvFamily, register_family
from .base import make_moves, reuse_game_set, write_manifest
from .protocol import GameRecord, GameSet, StepInfo, StepResult

SIZE = 4
"""Side of the map (RAGEN FrozenLakeEnvConfig.size)."""
P_FROZEN = 0.8
"""Probability that a cell is frozen ice rather than a hole (RAGEN FrozenLakeEnvConfig.p)."""
ACTIONS = ("Left", "Down", "Right", "Up")
"""Action names in gymnasium's action order (0 Left, 1 Down, 2 Right, 3 Up); RAGEN's action_lookup."""
MOVES = {0: (0, -1), 1: (1, 0), 2: (0, 1), 3: (-1, 0)}
SYMBOLS = {"player": "P", "frozen": "_", "hole": "O", "goal": "G", "player_in_hole": "X", "player_on_goal": "√"}
"""RAGEN's grid_lookup / grid_vocab."""
LEGEND = "P: you, _: frozen ice, O: hole, G: goal, X: you in a hole, √: you on the goal"
SYSTEM_PROMPT = ("You are solving the FrozenLake puzzle: walk on the frozen ice to the goal without falling into a "
                 f"hole. The ice is slippery: you may move in an unintended direction. Grid: {LEGEND}. "
                 "Reply with one move: Left, Down, Right or Up.")


def generate_map(seed: int, size: int = SIZE, p: float = P_FROZEN) -> list[str]:
    """A map (rows of 'S' start, 'F' frozen, 'H' hole, 'G' goal) from `seed`, as RAGEN's generate_random_map: cells
    frozen with probability p, start and goal at random distinct cells, redrawn until the goal is reachable."""
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 7]))
    while True:
        board = rng.choice(np.array(["F", "H"]), (size, size), p=[p, 1 - p])
        start, goal = tuple(rng.integers(size, size=2)), tuple(rng.integers(size, size=2))
        if start != goal:
            board[start], board[goal] = "S", "G"
            rows = ["".join(r) for r in board]
            if shortest_path(rows) is not None:
                return rows


def shortest_path(rows: list[str]) -> list[int] | None:
    """A shortest move sequence (gymnasium action ids) from S to G on the map without ice (moves never slip),
    avoiding holes; BFS, ties broken by action order. None when G cannot be reached."""
    n, m = len(rows), len(rows[0])
    start = next((r, c) for r in range(n) for c in range(m) if rows[r][c] == "S")
    prev: dict[tuple[int, int], tuple[tuple[int, int], int] | None] = {start: None}
    todo = deque([start])
    while todo:
        cell = todo.popleft()
        if rows[cell[0]][cell[1]] == "G":
            path = []
            while prev[cell] is not None:
                cell, a = prev[cell][0], prev[cell][1]
                path.append(a)
            return path[::-1]
        for a, (dr, dc) in MOVES.items():
            r, c = cell[0] + dr, cell[1] + dc
            if 0 <= r < n and 0 <= c < m and rows[r][c] != "H" and (r, c) not in prev:
                prev[(r, c)] = (cell, a)
                todo.append((r, c))
    return None


def _plan_from(rows: list[str], cell: tuple[int, int]) -> list[int] | None:
    moved = ["".join("S" if (r, c) == cell else ("F" if ch == "S" else ch) for c, ch in enumerate(row))
             for r, row in enumerate(rows)]
    return shortest_path(moved) if rows[cell[0]][cell[1]] not in "HG" else None


def parse_move(text: str) -> int | None:
    """Gymnasium action id of a move name (case-insensitive, surrounding punctuation ignored), None if not a move."""
    name = text.strip().strip(".!`'\"").lower()
    return next((i for i, a in enumerate(ACTIONS) if a.lower() == name), None)


class FrozenLakeEnv:
    """FrozenLake behind the Env protocol; `slippery` False makes every move go where intended (tests, analysis)."""

    def __init__(self, slippery: bool = True, max_steps: int = 100):
        self.slippery, self.max_steps = slippery, max_steps
        self.gym = None
        self.done = True

    def reset(self, game: str) -> StepResult:
        """Start game `game` (a seed, e.g. "17"). Raises ValueError when `game` is not an integer."""
        from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLake

        self.seed = int(game)
        self.rows = generate_map(self.seed)
        self.gym = GymFrozenLake(desc=self.rows, is_slippery=self.slippery)
        self.gym.reset(seed=self.seed)
        self.steps, self.score, self.done = 0, 0.0, False
        return StepResult(self.render(), 0.0, False, self._info(True, False))

    @property
    def cell(self) -> tuple[int, int]:
        return divmod(int(self.gym.s), self.gym.ncol)

    def render(self) -> str:
        """The map as RAGEN's text grid, one row per line."""
        r0, c0 = self.cell
        out = []
        for r, row in enumerate(self.rows):
            line = ""
            for c, ch in enumerate(row):
                if (r, c) == (r0, c0):
                    line += SYMBOLS["player_in_hole" if ch == "H" else "player_on_goal" if ch == "G" else "player"]
                else:
                    line += {"H": SYMBOLS["hole"], "G": SYMBOLS["goal"]}.get(ch, SYMBOLS["frozen"])
            out.append(line)
        return "\n".join(out)

    def _info(self, valid: bool, won: bool) -> StepInfo:
        plan = None if self.done else _plan_from(self.rows, self.cell)
        return StepInfo(won=won, lost=self.done and not won and self.rows[self.cell[0]][self.cell[1]] == "H",
                        score=self.score, max_score=1.0, admissible=[] if self.done else list(ACTIONS), valid=valid,
                        expert_action=ACTIONS[plan[0]] if plan else None,
                        objective=f"Reach the goal G without falling into a hole O. Grid: {LEGEND}.")

    def move(self, a: int) -> tuple[float, bool]:
        """One gymnasium step of action id `a`, its slip drawn from (seed, move count). Returns (reward, terminated)."""
        self.gym.np_random = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, 1, self.steps])))
        _, r, terminated, _, _ = self.gym.step(a)
        self.steps += 1
        return float(r), bool(terminated)

    def step(self, action: str) -> StepResult:
        """Make the move(s) in `action` ("Up", or "Left || Up"): in order until the episode ends (base.make_moves)."""
        if self.done:
            return StepResult("The game is over.", 0.0, True, self._info(False, False))
        valid, total, over, _ = make_moves(action, parse_move, self.move, self.max_steps - self.steps)
        self.done = over
        won = total > 0  # the goal pays the only reward (1), and ends the episode
        self.score += total
        obs = self.render()
        if not valid:
            obs = f"Invalid action {action.strip()[:40]!r}: use Left, Down, Right or Up.\n{obs}"
        return StepResult(obs, total, self.done, self._info(valid, won))

    def close(self) -> None:
        if self.gym is not None:
            self.gym.close()


def winning_moves(seed: int, plan: list[int]) -> list[str]:
    """The moves that walk `plan`'s cells on this seed's ice: at each step the action whose slip (drawn from (seed,
    move count)) lands on the plan's next cell. Raises RuntimeError if a step cannot be realised (a bug)."""
    env = FrozenLakeEnv()
    env.reset(str(seed))
    out = []
    for a_plan in plan:
        s0, t0 = int(env.gym.s), env.steps
        dr, dc = MOVES[a_plan]
        target = (env.cell[0] + dr, env.cell[1] + dc)
        for a in (a_plan, *[x for x in range(4) if x != a_plan]):
            env.gym.s, env.steps = s0, t0
            env.move(a)
            if env.cell == target:
                out.append(ACTIONS[a])
                break
        else:
            raise RuntimeError(f"frozenlake seed {seed}: no action reaches {target} at move {t0}")
    return out


def make_frozenlake_games(out, n: int, seed: int = 0, force: bool = False) -> GameSet:
    """Write `n` FrozenLake games (seeds seed … seed+n-1) to out/manifest.json with their walkthroughs (module
    docstring) and params {"plan": the intended directions, "map": the map rows}."""
    from .base import load_game_set

    out = Path(out)
    params = {"n": n, "seed": seed}
    if (old := reuse_game_set(out, "frozenlake", params, force)) is not None:
        return old
    out.mkdir(parents=True, exist_ok=True)
    games = []
    for s in range(seed, seed + n):
        rows = generate_map(s)
        plan = shortest_path(rows)
        games.append(GameRecord(path=str(s), name=f"frozenlake-{s}", seed=s, max_score=1.0,
                                walkthrough=winning_moves(s, plan),
                                params={"plan": [ACTIONS[a] for a in plan], "map": rows}))
    write_manifest(out, "frozenlake", games, params)
    return load_game_set(out)


register_family(EnvFamily(name="frozenlake", make_env=FrozenLakeEnv, make_games=make_frozenlake_games,
                          system_prompt=SYSTEM_PROMPT, game_id="seed", preload=("gymnasium",)))
