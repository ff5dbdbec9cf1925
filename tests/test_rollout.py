"""Rollouts (agentrl_lib/rollout.py): token-in/token-out, masks and turn ends with a tiny random-weight model on real
games, env failures, a process pool, and a non-HF generator (the Generator seam) driving `rollout`."""

import pytest
import torch

from agentrl_lib.envs.pool import SerialPool
from agentrl_lib.envs.protocol import EnvFailure
from agentrl_lib.generation import HFGenerator, TurnSample
from agentrl_lib.models import load_policy
from agentrl_lib.policy import token_forward
from agentrl_lib.prompts import SYSTEM_PROMPT, ChatFormat, feedback_message, first_user_message, parse_action
from agentrl_lib.rollout import collate, rollout


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_policy(tiny_model_dir, device="cpu")


def test_chat_format_reproduces_the_template(tokenizer):
    chat = ChatFormat(tokenizer)
    assert chat.check(SYSTEM_PROMPT, [("Objective: cook\n\n-= Kitchen =-", "open fridge"),
                                      ("You open the fridge.", "take apple from fridge"), ("Done.", "eat meal")])


def test_rollout_token_layout_on_real_games(tiny, cooking_games):
    model, tok = tiny
    chat = ChatFormat(tok)
    torch.manual_seed(0)
    games = [g.path for g in cooking_games.games[:2] for _ in range(2)]
    trajs, stats = rollout(HFGenerator(model, tok), tok, SerialPool(4), games, max_turns=3, max_new_tokens=8,
                           temperature=1.0, chat=chat)
    assert stats.generated_tokens > 0 and [t.group for t in trajs] == [0, 0, 1, 1]
    for tr in trajs:
        assert tr.n_turns == 3 and tr.termination == "max_turns"
        assert len(tr.ids) == len(tr.mask) == len(tr.behaviour_logprobs)
        # rebuild the sequence from its parts: prompt, then per turn the sampled tokens and the env's tokens
        user = first_user_message(_objective(tr.game), tr.observations[0])
        rebuilt = chat.prompt_ids(SYSTEM_PROMPT, user)
        assert tr.ids[:len(rebuilt)] == rebuilt and tr.prompt_len == len(rebuilt)
        assert not any(tr.mask[:tr.prompt_len])
        start = tr.prompt_len
        for k, end in enumerate(tr.turn_ends):
            span = tr.ids[start:end + 1]
            assert all(tr.mask[start:end + 1]), "every sampled token is a policy token"
            text = tok.decode([x for x in span if x != chat.eos_id])
            assert text == tr.replies[k] and parse_action(text) == tr.actions[k]
            pos = end + 1
            if tr.truncated[k]:  # the closing eos was not sampled: it is in the sequence with mask 0
                assert tr.ids[pos] == chat.eos_id and tr.mask[pos] == 0 and tr.behaviour_logprobs[pos] == 0
                pos += 1
            else:
                assert span[-1] == chat.eos_id
            if k + 1 < tr.n_turns:
                env_ids = chat.user_turn_ids(feedback_message(tr.observations[k + 1]))
                assert tr.ids[pos:pos + len(env_ids)] == env_ids
                assert not any(tr.mask[pos:pos + len(env_ids)])
                start = pos + len(env_ids)
    # sampled ids are the trained ids, and the rollout's log-probs are the policy's log-probs of those ids
    batch = collate(trajs, tok.pad_token_id, "cpu")
    for i, tr in enumerate(trajs):
        assert batch["input_ids"][i, :len(tr.ids)].tolist() == tr.ids
    with torch.no_grad():
        out = token_forward(model, batch["input_ids"], batch["attention_mask"], batch["mask"], temperature=1.0)
    diff = ((out["logprobs"] - batch["behaviour_logprobs"]).abs() * batch["mask"]).max().item()
    assert diff < 1e-4


def _objective(path):
    from agentrl_lib.envs.textworld import TextWorldEnv

    env = TextWorldEnv()
    obj = env.reset(path).info.objective
    env.close()
    return obj


class FlakyPool(SerialPool):
    """Slot 1's environment fails on its second step (as a crashed worker would)."""

    def step(self, slots, actions):
        self.calls = getattr(self, "calls", 0) + 1
        out = super().step(slots, actions)
        return [EnvFailure("worker crashed (test)") if (s == 1 and self.calls == 2) else r for s, r in zip(slots, out)]


def test_env_failure_ends_one_episode_only(tiny, cooking_games):
    model, tok = tiny
    games = [cooking_games.games[0].path] * 3
    trajs, _ = rollout(HFGenerator(model, tok), tok, FlakyPool(3), games, max_turns=3, max_new_tokens=4,
                       temperature=1.0)
    assert trajs[1].termination.startswith("env_error") and trajs[1].n_turns == 2
    assert trajs[0].termination == trajs[2].termination == "max_turns" and trajs[0].n_turns == 3


@pytest.mark.subprocess
def test_rollout_over_a_process_pool(tiny, cooking_games):
    """The same rollout with one env worker process per episode."""
    from agentrl_lib.envs.process_pool import ProcessPool

    model, tok = tiny
    torch.manual_seed(0)
    with ProcessPool(2, family="textworld") as pool:
        trajs, stats = rollout(HFGenerator(model, tok), tok, pool, [cooking_games.games[0].path] * 2, max_turns=2,
                               max_new_tokens=4, temperature=1.0)
    assert [t.termination for t in trajs] == ["max_turns", "max_turns"] and stats.turns == 4
    assert all(len(t.observations) == 3 for t in trajs)


# --------------------------------------------------------------------------------------------------- generator
class ScriptedGenerator:
    """A Generator that is not a transformers model: row r of turn k replies `replies[k]` (+ eos) with log-prob −1
    per token; records every protocol call."""

    def __init__(self, tokenizer, replies: list[str]):
        self.tok, self.replies = tokenizer, replies
        self.eos_id = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
        self.pad_id = tokenizer.pad_token_id
        self.context_limit = 4096
        self.calls: list[tuple] = []
        self.rows: list[list[int]] = []

    def start(self, contexts):
        self.calls.append(("start", len(contexts)))
        self.rows = [list(c) for c in contexts]
        self.turn = 0

    def generate(self, max_new_tokens, temperature):
        self.calls.append(("generate", len(self.rows)))
        ids = self.tok(self.replies[self.turn], add_special_tokens=False)["input_ids"][:max_new_tokens - 1]
        ids = ids + [self.eos_id]
        self.turn += 1
        for row in self.rows:
            row += ids
        return TurnSample([list(ids) for _ in self.rows], [[-1.0] * len(ids) for _ in self.rows],
                          [False] * len(self.rows), 0.0)

    def keep(self, rows):
        self.calls.append(("keep", list(rows)))
        self.rows = [self.rows[r] for r in rows]

    def append(self, blocks):
        self.calls.append(("append", len(blocks)))
        for row, block in zip(self.rows, blocks):
            row += block

    def sync(self, policy):
        self.calls.append(("sync",))


def test_a_non_hf_generator_drives_rollout(tokenizer):
    """The seam: rollout talks to the generator only through start / generate / keep / append, and records exactly
    the ids and log-probs the generator returned."""
    from agentrl_lib.envs.base import StepInfo, StepResult

    class Env:
        def reset(self, game):
            self.game, self.t = game, 0
            return StepResult("A room.", 0.0, False, StepInfo(max_score=1, objective="look", admissible=["look"]))

        def step(self, action):
            self.t += 1
            done = self.t == {"short": 1, "long": 3}.get(self.game, 99)
            return StepResult(f"seen {self.t}", 0.0, done, StepInfo(max_score=1, valid=action == "look"))

        def close(self):
            pass

    gen = ScriptedGenerator(tokenizer, ["look", "look", "look"])
    chat = ChatFormat(tokenizer)
    trajs, stats = rollout(gen, tokenizer, SerialPool(3, factory=Env), ["long", "short", "endless"], max_turns=3,
                           chat=chat)
    assert gen.calls == [("start", 3), ("generate", 3), ("keep", [0, 2]), ("append", 2), ("generate", 2),
                         ("keep", [0, 1]), ("append", 2), ("generate", 2)]
    assert [t.n_turns for t in trajs] == [3, 1, 3] and [t.actions for t in trajs][1] == ["look"]
    assert [t.termination for t in trajs] == ["done", "done", "max_turns"]
    reply = tokenizer("look", add_special_tokens=False)["input_ids"] + [gen.eos_id]
    for t, row in zip([trajs[0], trajs[2]], gen.rows):
        assert t.ids == row[:len(t.ids)], "the trajectory holds the generator's tokens"
        sampled = [i for i, m in zip(t.ids, t.mask) if m]
        assert sampled == reply * 3
        assert [lp for lp, m in zip(t.behaviour_logprobs, t.mask) if m] == [-1.0] * len(sampled)
    assert stats.generated_tokens == len(reply) * (3 + 2 + 2)
