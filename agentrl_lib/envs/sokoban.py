"""Sokoban (RAGEN's SimpleSokoban, ../shared/REFERENCE.md §B): a 6×6 room with one box. Family "sokoban"; a game is a
seed (EnvFamily.game_id = "seed").

A game: a 6×6 room walled round, 0-3 extra walls inside, a target, a box and the player on distinct free cells, all
drawn from the seed; a draw is kept only when a breadth-first search over (player, box) states finds a solution
(`solve`), so every room is solvable, and that BFS solution, the fewest moves, is the walkthrough. (RAGEN generates
rooms by reverse play, gym_sokoban's generate_room, and rejects rooms it cannot solve within search_depth; the sizes
match RAGEN's config/envs.yaml SimpleSokoban: dim 6×6, num_boxes 1.)

Rendered as RAGEN's text grid (SokobanEnvConfig.grid_lookup): # wall, _ empty, O target, X box, √ box on target,
P player, S player on target; the legend is in the system prompt and the objective.
Actions: Up, Down, Left, Right (case-insensitive; RAGEN's action_lookup). Walking into a box pushes it when the
cell behind it is free; walking into a wall or an unpushable box leaves everything in place (still a step).
One turn may carry several moves joined by "||" (RAGEN's answer format, prompts.parse_reply caps them at
env.max_actions_per_turn): made in order, unknown ones skipped, stopping when the room is solved or the step limit is
reached; the turn's reward is their sum. info.valid is False when any move of the turn was unknown, or there was
none (→ format penalty).

Rewards (gym_sokoban's, as RAGEN uses them): −0.1 per move, +1 for pushing the box onto the target, −1 for pushing
it off, +10 when the room is solved (then the episode ends, won). score is their running sum; max_score is the score
of the optimal solution, 11 − 0.1·(its length), what a win scores at best. reward.kind = dense gives each turn its
score increment / max_score, the win topped up to a total of 1 (rewards.dense_turn_rewards), so a turn of wandering
costs ≈ −0.01 per move; reward.kind = sparse gives 1 for solving, 0 otherwise. An episode also ends after
`max_steps` moves (100, RAGEN's max_steps); max_turns 5-10 suits it (RAGEN: at most 10 actions per episode).
"""
from __future__ import annotations

from collections import deque
from pathlib import Path

import numpy as np

from . import EnvFamily, register_family
from .base import make_moves, reuse_game_set, write_manifest
from .protocol import GameRecord, GameSet, StepInfo, StepResult

SIZE = 6
"""Side of the room, walls included (RAGEN dim_room (6, 6))."""
MAX_INNER_WALLS = 3
"""Extra walls inside the room: 0 to this many, drawn from the seed."""
ACTIONS = ("Up", "Down", "Left", "Right")
"""RAGEN's action_lookup {1: Up, 2: Down, 3: Left, 4: Right}."""
MOVES = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}
STEP_PENALTY, BOX_ON_TARGET, BOX_OFF_TARGET, SOLVED = -0.1, 1.0, -1.0, 10.0
"""gym_sokoban's penalty_for_step, reward_box_on_target, penalty_box_off_target, reward_finished (RAGEN's rewards)."""
LEGEND = "#: wall, _: empty, O: target, X: box, √: box on target, P: you, S: you on the target"
SYSTEM_PROMPT = ("You are solving the Sokoban puzzle. You are the player and you need to push the box onto the "
                 "target. When you are right next to a box, you can push it by moving in the same direction. You "
                 f"cannot push a box through a wall, and you cannot pull a box. Grid: {LEGEND}. "
                 "Reply with one move: Up, Down, Left or Right.")

Cell = tuple[int, int]


class Room:
    """A room: `walls` (set of cells), `target`, `box`, `player` ((row, col) cells)."""

    def __init__(self, walls: set[Cell], target: Cell, box: Cell, player: Cell):
        self.walls, self.target, self.box, self.player = set(walls), target, box, player

    @classmethod
    def from_text(cls, text: str) -> "Room":
        """A room from RAGEN's grid symbols (rows of # _ O X √ P S); raises ValueError when it has not exactly one
        box, one target and one player."""
        walls, targets, boxes, players = set(), [], [], []
        for r, row in enumerate(text.strip().splitlines()):
            for c, ch in enumerate(row.strip()):
                if ch == "#":
                    walls.add((r, c))
                if ch in "O√S":
                    targets.append((r, c))
                if ch in "X√":
                    boxes.append((r, c))
                if ch in "PS":
                    players.append((r, c))
        if not (len(targets) == len(boxes) == len(players) == 1):
            raise ValueError(f"a room needs one target, one box and one player; got {len(targets)}, {len(boxes)}, "
                             f"{len(players)}")
        return cls(walls, targets[0], boxes[0], players[0])

    def render(self) -> str:
        """RAGEN's text grid, one row per line."""
        n = 1 + max(max(r for r, _ in self.walls), self.player[0], self.box[0])
        m = 1 + max(max(c for _, c in self.walls), self.player[1], self.box[1])
        rows = []
        for r in range(n):
            line = ""
            for c in range(m):
                cell, on_target = (r, c), (r, c) == self.target
                if cell in self.walls:
                    line += "#"
                elif cell == self.box:
                    line += "√" if on_target else "X"
                elif cell == self.player:
                    line += "S" if on_target else "P"
                else:
                    line += "O" if on_target else "_"
            rows.append(line)
        return "\n".join(rows)


def push(walls: set[Cell], player: Cell, box: Cell, action: str) -> tuple[Cell, Cell]:
    """The (player, box) after `action` from (player, box): a move into a wall or an unpushable box changes nothing."""
    dr, dc = MOVES[action]
    nxt = (player[0] + dr, player[1] + dc)
    if nxt in walls:
        return player, box
    if nxt == box:
        beyond = (box[0] + dr, box[1] + dc)
        if beyond in walls:
            return player, box
        return nxt, beyond
    return nxt, box


def solve(room: Room) -> list[str] | None:
    """A solution with the fewest moves (BFS over (player, box) states; ties broken by ACTIONS order), [] when the
    box is already on the target, None when the room cannot be solved."""
    start = (room.player, room.box)
    prev: dict = {start: None}
    todo = deque([start])
    while todo:
        state = todo.popleft()
        if state[1] == room.target:
            path = []
            while prev[state] is not None:
                state, a = prev[state]
                path.append(a)
            return path[::-1]
        for a in ACTIONS:
            nxt = push(room.walls, *state, a)
            if nxt not in prev:
                prev[nxt] = (state, a)
                todo.append(nxt)
    return None


def generate_room(seed: int, check: bool = True) -> tuple[Room, list[str] | None]:
    """The room of game `seed` and its BFS solution: draws (inner walls, target, box, player) from the seed until the
    room is solvable and the box starts off the target. `check=False` keeps the first draw whatever it is (the
    tests' negative control: such rooms can be unsolvable; its solution is then None)."""
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 11]))
    border = {(r, c) for r in range(SIZE) for c in range(SIZE) if r in (0, SIZE - 1) or c in (0, SIZE - 1)}
    inner = [(r, c) for r in range(1, SIZE - 1) for c in range(1, SIZE - 1)]
    while True:
        k = int(rng.integers(0, MAX_INNER_WALLS + 1))
        pick = rng.choice(len(inner), size=k + 3, replace=False)
        cells = [inner[i] for i in pick]
        room = Room(border | set(cells[:k]), target=cells[k], box=cells[k + 1], player=cells[k + 2])
        solution = solve(room)
        if not check or solution:
            return room, solution


def parse_move(text: str) -> str | None:
    """The move name of `text` (case-insensitive, surrounding punctuation ignored), None if not a move."""
    name = text.strip().strip(".!`'\"").lower()
    return next((a for a in ACTIONS if a.lower() == name), None)


class SokobanEnv:
    """Sokoban behind the Env protocol. `reset` also takes a room drawn in RAGEN's symbols (tests, hand-made rooms)."""

    def __init__(self, max_steps: int = 100):
        self.max_steps = max_steps
        self.done = True

    def reset(self, game: str) -> StepResult:
        """Start game `game`: a seed ("17"), or a room in RAGEN's grid symbols (several lines). Raises ValueError for
        anything else."""
        if "\n" in game:
            self.room = Room.from_text(game)
            best = solve(self.room)
        else:
            self.room, best = generate_room(int(game))
        self.max_score = round(SOLVED + BOX_ON_TARGET + STEP_PENALTY * len(best), 6) if best else SOLVED
        self.steps, self.score, self.done = 0, 0.0, False
        return StepResult(self.room.render(), 0.0, False, self._info(True, False))

    def _info(self, valid: bool, won: bool) -> StepInfo:
        plan = None if self.done else solve(self.room)
        return StepInfo(won=won, lost=False, score=round(self.score, 6), max_score=self.max_score,
                        admissible=[] if self.done else list(ACTIONS), valid=valid,
                        expert_action=plan[0] if plan else None,
                        objective=f"Push the box X onto the target O. Grid: {LEGEND}.")

    def move(self, action: str) -> tuple[float, bool]:
        """One move (a name of ACTIONS). Returns (its reward (module docstring), whether the room is solved)."""
        room = self.room
        was_on = room.box == room.target
        room.player, room.box = push(room.walls, room.player, room.box, action)
        now_on = room.box == room.target
        self.steps += 1
        reward = STEP_PENALTY + (BOX_ON_TARGET if now_on and not was_on else 0.0) \
            + (BOX_OFF_TARGET if was_on and not now_on else 0.0) + (SOLVED if now_on else 0.0)
        return reward, now_on

    def step(self, action: str) -> StepResult:
        """Make the move(s) in `action` ("Up", or "Up || Left"): in order until the episode ends (base.make_moves)."""
        if self.done:
            return StepResult("The game is over.", 0.0, True, self._info(False, False))
        valid, total, over, made = make_moves(action, parse_move, self.move, self.max_steps - self.steps)
        self.done = over
        won = made > 0 and self.room.box == self.room.target  # a room given solved (√) is won only by a move
        self.score += total
        obs = self.room.render()
        if not valid:
            obs = f"Invalid action {action.strip()[:40]!r}: use Up, Down, Left or Right.\n{obs}"
        return StepResult(obs, round(total, 6), self.done, self._info(valid, won))

    def close(self) -> None:
        pass


def make_sokoban_games(out, n: int, seed: int = 0, force: bool = False) -> GameSet:
    """Write `n` Sokoban games (seeds seed … seed+n-1) to out/manifest.json, each with its BFS solution as the
    walkthrough and max_score = the optimal solution's score."""
    from .base import load_game_set

    out = Path(out)
    params = {"n": n, "seed": seed}
    if (old := reuse_game_set(out, "sokoban", params, force)) is not None:
        return old
    out.mkdir(parents=True, exist_ok=True)
    games = []
    for s in range(seed, seed + n):
        _, best = generate_room(s)
        games.append(GameRecord(path=str(s), name=f"sokoban-{s}", seed=s,
                                max_score=round(SOLVED + BOX_ON_TARGET + STEP_PENALTY * len(best), 6),
                                walkthrough=best))
    write_manifest(out, "sokoban", games, params)
    return load_game_set(out)


register_family(EnvFamily(name="sokoban", make_env=SokobanEnv, make_games=make_sokoban_games,
                          system_prompt=SYSTEM_PROMPT, game_id="seed"))
