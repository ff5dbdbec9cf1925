"""Rollouts (token-in/token-out, masks, turn ends) and trainer updates with a tiny random-weight model."""
import json

import pytest
import torch

from agentrl_lib.config import AlgoConfig, EnvConfig, RewardConfig, RunConfig, TrainConfig
from agentrl_lib.envs.pool import EnvFailure, SerialPool
from agentrl_lib.models import load_policy
from agentrl_lib.prompts import SYSTEM_PROMPT, ChatFormat, feedback_message, first_user_message, parse_action
from agentrl_lib.generation import HFGenerator
from agentrl_lib.policy import token_forward
from agentrl_lib.rollout import collate, rollout
from agentrl_lib.trainer import Trainer, is_finite_row
from helpers import BrokenEnv, ParityEnv, scripted_games


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
    trajs, stats = rollout(HFGenerator(model, tok), tok, SerialPool(4), games, max_turns=3, max_new_tokens=8, temperature=1.0, chat=chat)
    assert stats.generated_tokens > 0 and [t.group for t in trajs] == [0, 0, 1, 1]
    for tr in trajs:
        assert tr.n_turns == 3 and tr.termination == "max_turns"
        assert len(tr.ids) == len(tr.mask) == len(tr.logprobs)
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
                assert tr.ids[pos] == chat.eos_id and tr.mask[pos] == 0 and tr.logprobs[pos] == 0
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
    trajs, _ = rollout(HFGenerator(model, tok), tok, FlakyPool(3), games, max_turns=3, max_new_tokens=4, temperature=1.0)
    assert trajs[1].termination.startswith("env_error") and trajs[1].n_turns == 2
    assert trajs[0].termination == trajs[2].termination == "max_turns" and trajs[0].n_turns == 3


@pytest.mark.parametrize("algo,checkpointing", [("ppo", False), ("grpo", False), ("rloo", False), ("ppo", True)])
def test_one_update_changes_every_parameter(algo, checkpointing, tiny_model_dir, tmp_path):
    games = scripted_games(tmp_path / "games")
    cfg = RunConfig(env=EnvConfig(games=str(games), max_turns=2), reward=RewardConfig(kind="dense"),
                    algo=AlgoConfig.from_preset(algo, group_size=4, kl_coef=0.01),
                    model=ModelCPU(),
                    train=TrainConfig(steps=1, games_per_step=2, minibatch_size=8, lr=1e-3, max_new_tokens=6,
                                      temperature=1.0, seed=1, gradient_checkpointing=checkpointing))
    trainer = Trainer(cfg, tmp_path / "run", init=tiny_model_dir, pool=SerialPool(8, factory=ParityEnv),
                      progress=False)
    assert trainer.policy.model.gradient_checkpointing == checkpointing
    before = {n: p.detach().clone() for n, p in trainer.policy.named_parameters() if p.requires_grad}
    vh_before = None if trainer.value_head is None else trainer.value_head.linear.weight.detach().clone()
    row = trainer.step(0)
    assert row["skipped_update"] == 0.0 and row["return_std"] > 0
    unchanged = [n for n, p in trainer.policy.named_parameters() if p.requires_grad and torch.equal(p, before[n])]
    assert not unchanged, f"parameters not updated: {unchanged}"
    if algo == "ppo":
        assert not torch.equal(trainer.value_head.linear.weight, vh_before)
        assert "value_loss" in row and "explained_variance" in row
    assert is_finite_row(row), row
    for key in ("success_rate", "return_mean", "kl_ref", "entropy", "clip_frac", "grad_norm", "gen_tokens_per_s",
                "step_seconds", "invalid_rate", "mean_turns"):
        assert key in row


def ModelCPU():
    from agentrl_lib.config import ModelConfig

    return ModelConfig(device="cpu")


def test_checkpoint_resume_continues_the_run(tiny_model_dir, tmp_path):
    games = scripted_games(tmp_path / "games")

    def cfg(steps):
        return RunConfig(env=EnvConfig(games=str(games), max_turns=2),
                         algo=AlgoConfig.from_preset("rloo", group_size=4, kl_coef=0.01), model=ModelCPU(),
                         train=TrainConfig(steps=steps, games_per_step=1, minibatch_size=4, max_new_tokens=4,
                                           checkpoint_every=1, lr=1e-3))

    run = tmp_path / "run"
    t1 = Trainer(cfg(1), run, init=tiny_model_dir, pool=SerialPool(4, factory=ParityEnv), progress=False)
    t1.train()
    assert (run / "checkpoints" / "latest").read_text() == "step_000001"
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[0])["skipped_update"] == 0.0, "step 1 must learn"
    assert not list((run / "checkpoints").glob(".tmp-*")), "no temp checkpoint left behind"
    with pytest.raises(FileExistsError, match="--resume"):
        Trainer(cfg(2), run, init=tiny_model_dir, pool=SerialPool(4, factory=ParityEnv), progress=False)
    # a row written after the checkpoint (an interrupted step) is dropped on resume
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 2, "partial": True}) + "\n")
    t2 = Trainer(cfg(2), run, resume=True, pool=SerialPool(4, factory=ParityEnv), progress=False)
    assert t2.start_step == 1
    # the KL reference of the resumed run is the model the run started from, not the checkpoint
    init, _ = load_policy(tiny_model_dir, device="cpu")
    ref = dict(t2.ref.named_parameters())
    assert all(torch.equal(p, ref[n]) for n, p in init.named_parameters())
    assert any(not torch.equal(p, ref[n]) for n, p in t2.policy.named_parameters()), "step 1 moved the policy"
    rows = t2.train()
    assert [r["step"] for r in rows] == [1, 2] and "partial" not in rows[-1]
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert (run / "checkpoints" / "latest").read_text() == "step_000002"
    assert (run / "learning_curve.png").stat().st_size > 1000


def test_rollout_over_a_process_pool(tiny, cooking_games):
    """The same rollout with one env worker process per episode."""
    from agentrl_lib.envs.pool import ProcessPool

    model, tok = tiny
    torch.manual_seed(0)
    with ProcessPool(2, family="textworld") as pool:
        trajs, stats = rollout(HFGenerator(model, tok), tok, pool, [cooking_games.games[0].path] * 2, max_turns=2, max_new_tokens=4,
                               temperature=1.0)
    assert [t.termination for t in trajs] == ["max_turns", "max_turns"] and stats.turns == 4
    assert all(len(t.observations) == 3 for t in trajs)


def test_a_step_where_every_env_fails_is_logged_not_fatal(tiny_model_dir, tmp_path):
    games = scripted_games(tmp_path / "games")
    cfg = RunConfig(env=EnvConfig(games=str(games), max_turns=2, max_env_error_frac=1.0),  # 1: never stop
                    algo=AlgoConfig.from_preset("rloo", group_size=2),
                    model=ModelCPU(), train=TrainConfig(steps=2, games_per_step=1, max_new_tokens=4))
    trainer = Trainer(cfg, tmp_path / "run", init=tiny_model_dir, pool=SerialPool(2, factory=BrokenEnv),
                      progress=False)
    rows = trainer.train()
    assert [r["skipped_update"] for r in rows] == [1.0, 1.0] and rows[0]["env_errors"] == 2
    assert "engine exploded" in rows[0]["env_error_reasons"][0]
