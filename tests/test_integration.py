"""The embedded model end to end: load, a short rollout on a real game, one RL update (≈ 1 min on 2 CPU cores)."""
import pytest
import torch

from agentrl_lib.config import AlgoConfig, EnvConfig, RunConfig, TrainConfig
from agentrl_lib.models import load_policy
from agentrl_lib.trainer import Trainer, is_finite_row

pytestmark = pytest.mark.slow


def test_embedded_model_rollout_and_one_ppo_update(cooking_games, tmp_path):
    model, tok = load_policy("embedded")
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(134.5e6, rel=0.01)
    cfg = RunConfig(env=EnvConfig(games=str(cooking_games.root), max_turns=2),
                    algo=AlgoConfig.from_preset("ppo", group_size=2),
                    train=TrainConfig(steps=1, games_per_step=1, minibatch_size=2, max_new_tokens=8, seed=0))
    trainer = Trainer(cfg, tmp_path / "run", init="embedded", progress=False)
    before = trainer.policy.model.layers[0].mlp.down_proj.weight.detach().clone()
    rows = trainer.train()
    trainer.close()
    row = rows[0]
    assert row["episodes"] == 2 and row["mean_turns"] == 2 and row["generated_tokens"] > 0
    assert row["logprob_mismatch"] < 1e-3, "rollout log-probs must match the training forward"
    assert is_finite_row(row)
    assert not torch.equal(before, trainer.policy.model.layers[0].mlp.down_proj.weight)
    # the checkpoint reloads as a model for `agentrl eval --model RUN_DIR`
    reloaded, _ = load_policy(str(tmp_path / "run"))
    assert torch.equal(reloaded.model.layers[0].mlp.down_proj.weight,
                       trainer.policy.model.layers[0].mlp.down_proj.weight)
