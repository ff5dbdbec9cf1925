"""The policy-optimisation and generation seams: the ESTIMATORS registry through config validation and one Trainer
step with an estimator registered here, legacy `algo.name` configs, and a non-HF generator driving `rollout`."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch
import yaml

from agentrl_lib import checkpoint as ckpt_lib
from agentrl_lib.advantages import (ESTIMATORS, AdvantageInputs, broadcast_to_tokens, grpo_advantages,
                                    register_estimator)
from agentrl_lib.config import (ALGO_PRESETS, AlgoConfig, ConfigError, EnvConfig, ModelConfig, RewardConfig,
                                RunConfig, TrainConfig)
from agentrl_lib.envs.pool import SerialPool
from agentrl_lib.generation import TurnSample
from agentrl_lib.prompts import ChatFormat
from agentrl_lib.rollout import rollout
from agentrl_lib.trainer import Trainer

from helpers import CoinEnv, coin_games


# ------------------------------------------------------------------------------------- estimators and config
@pytest.fixture
def registry():
    """ESTIMATORS restored after the test (estimators registered by a test do not leak into others)."""
    saved = dict(ESTIMATORS)
    yield ESTIMATORS
    ESTIMATORS.clear()
    ESTIMATORS.update(saved)


@dataclass
class Reinforce:
    """A toy estimator, A_i = R_i on every policy token (REINFORCE without baseline); records what it was given.
    With needs_critic it returns the Monte Carlo return R_i as every token's value target."""

    name: str = "reinforce"
    needs_critic: bool = False
    min_group_size: int = 1
    calls: list = field(default_factory=list)

    def __call__(self, inputs: AdvantageInputs, algo: AlgoConfig):
        self.calls.append(inputs)
        adv = broadcast_to_tokens(inputs.returns.to(inputs.mask.device), inputs.mask)
        return adv, (adv.clone() if self.needs_critic else None)


def test_every_registered_estimator_round_trips_through_config_validation(tmp_path):
    assert {"gae", "grpo", "rloo"} <= set(ESTIMATORS)
    for name, est in ESTIMATORS.items():
        cfg = RunConfig(algo=AlgoConfig(advantage=name, group_size=est.min_group_size))
        cfg.save(tmp_path / f"{name}.yaml")
        assert RunConfig.load(tmp_path / f"{name}.yaml") == cfg
        if est.min_group_size > 1:  # the registry's min_group_size is what validation enforces
            with pytest.raises(ConfigError, match=f"'{name}' needs algo.group_size >= {est.min_group_size}"):
                AlgoConfig(advantage=name, group_size=est.min_group_size - 1).validate()
    with pytest.raises(ConfigError, match=r"algo.advantage must be one of \['bilevel_gae', 'dr_grpo', 'gae', 'gigpo'"):
        AlgoConfig(advantage="reinforce").validate()


def test_presets_labels_and_a_registered_estimator(registry):
    assert {p: AlgoConfig.from_preset(p).advantage for p in ("ppo", "grpo", "rloo")} == {"ppo": "gae", "grpo": "grpo",
                                                                                       "rloo": "rloo"}
    assert [AlgoConfig.from_preset(p).label for p in ALGO_PRESETS] == list(ALGO_PRESETS)
    with pytest.raises(ConfigError, match="unknown algorithm preset 'dpo'"):
        AlgoConfig.from_preset("dpo")
    register_estimator(Reinforce(min_group_size=3))
    assert AlgoConfig(advantage="reinforce", group_size=3).label == "reinforce"
    with pytest.raises(ConfigError, match="'reinforce' needs algo.group_size >= 3"):
        AlgoConfig(advantage="reinforce", group_size=2).validate()
    with pytest.raises(ValueError, match="exists"):
        register_estimator(Reinforce())


def test_legacy_algo_name_loads_as_its_preset(tmp_path):
    """Run dirs written before the rename hold `algo: {name: ppo}`: they load, resume, and keep their meaning."""
    assert RunConfig.from_dict({"algo": {"name": "grpo", "group_size": 2}}).algo == AlgoConfig(advantage="grpo",
                                                                                              group_size=2)
    with pytest.raises(ConfigError, match="algo.name .* must be one of"):
        RunConfig.from_dict({"algo": {"name": "dpo"}})
    with pytest.raises(ConfigError, match="contradicts algo.advantage"):
        RunConfig.from_dict({"algo": {"name": "ppo", "advantage": "rloo"}})
    old = RunConfig(env=EnvConfig(games="g")).to_dict()
    old["algo"] = {"name": "ppo", **{k: v for k, v in old["algo"].items() if k != "advantage"}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    cfg = ckpt_lib.resume_config(tmp_path)
    assert cfg.algo.advantage == "gae" and cfg.algo.label == "ppo"
    # the completeness check against a checkpoint's copy (every key present) reads the upgraded keys
    assert ckpt_lib._load_complete(tmp_path / "config.yaml", cfg.to_dict()) == cfg
    # negative control: a new-format file that lost algo.advantage is still incomplete
    del old["algo"]["name"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    with pytest.raises(ckpt_lib.CheckpointError, match="algo.advantage"):
        ckpt_lib._load_complete(tmp_path / "config.yaml", cfg.to_dict())


@pytest.mark.parametrize("needs_critic", [False, True])
def test_an_estimator_registered_here_trains_one_step(needs_critic, registry, tiny_model_dir, tmp_path):
    toy = register_estimator(Reinforce(needs_critic=needs_critic))
    cfg = RunConfig(env=EnvConfig(games=coin_games(tmp_path / "g"), max_turns=2), reward=RewardConfig(kind="dense"),
                    algo=AlgoConfig(advantage="reinforce", group_size=2), model=ModelConfig(device="cpu"),
                    train=TrainConfig(steps=1, games_per_step=2, minibatch_size=4, max_new_tokens=5, temperature=1.0,
                                      lr=1e-3, seed=1))
    with Trainer(cfg, tmp_path / "run", init=tiny_model_dir, pool=SerialPool(4, factory=CoinEnv),
                 progress=False) as trainer:
        assert (trainer.value_head is not None) == needs_critic  # a critic exists iff the estimator needs one
        before = {n: p.detach().clone() for n, p in trainer.policy.named_parameters() if p.requires_grad}
        row = trainer.step(0)
    assert not trainer._release_lock.alive, "leaving the with block closes the trainer (pool + run lock)"
    assert row["skipped_update"] == 0.0 and row["return_std"] > 0, "CoinEnv gives return spread at this seed"
    unchanged = [n for n, p in trainer.policy.named_parameters() if p.requires_grad and torch.equal(p, before[n])]
    assert not unchanged, f"parameters not updated: {unchanged}"
    assert ("explained_variance" in row) == needs_critic and ("value_loss" in row) == needs_critic
    (inputs,) = toy.calls
    B, T = inputs.mask.shape
    assert B == 4 and row["seq_len_max"] == T
    for name in ("token_rewards", "mask", "turn_end"):
        x = getattr(inputs, name)
        assert x.shape == (B, T) and x.dtype == torch.float32, name
    assert inputs.returns.shape == (B,) and inputs.returns.dtype == torch.float32
    assert inputs.group_ids.shape == (B,) and inputs.group_ids.dtype == torch.long
    assert torch.allclose(inputs.token_rewards.sum(1), inputs.returns)  # each turn's reward on its end token
    assert torch.all(inputs.turn_end <= inputs.mask)  # turn ends are policy tokens
    if needs_critic:
        assert inputs.values.shape == (B, T) and inputs.values.dtype == torch.float32
    else:
        assert inputs.values is None


def test_the_builtin_estimators_wrap_the_pure_functions():
    """GRPO through the registry = grpo_advantages broadcast to policy tokens; GAE returns value targets."""
    mask = torch.tensor([[0, 1, 1, 0], [0, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.float32)
    rewards = torch.tensor([[0, 0, 1.0, 0], [0, 0.5, 0, 0], [0, 0, 0, 2.0]])
    inputs = AdvantageInputs(token_rewards=rewards, mask=mask, returns=rewards.sum(1),
                             group_ids=torch.tensor([0, 0, 1]), turn_end=rewards.ne(0).float(),
                             values=torch.zeros(3, 4))
    adv, targets = ESTIMATORS["grpo"](inputs, AlgoConfig(advantage="grpo"))
    assert targets is None
    assert torch.equal(adv, grpo_advantages(inputs.returns, inputs.group_ids, 1e-6)[:, None] * mask)
    adv, targets = ESTIMATORS["gae"](inputs, AlgoConfig(normalize_advantages=False))
    assert torch.allclose(targets, torch.tensor([[0, 1.0, 1, 0], [0, 0.5, 0, 0], [2.0, 2, 2, 2]]))  # γ = λ = 1, V = 0
    assert torch.allclose(adv, targets)


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
        assert sampled == reply * 3 and [lp for lp, m in zip(t.logprobs, t.mask) if m] == [-1.0] * len(sampled)
    assert stats.generated_tokens == len(reply) * (3 + 2 + 2)
