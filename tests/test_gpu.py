"""CUDA paths: bf16 selection and a batched rollout on the GPU. Skipped on machines without CUDA (CI has none)."""
import pytest
import torch

from agentrl_lib.models import load_policy, pick_dtype

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_auto_dtype_is_fp32_on_cpu():
    assert pick_dtype("auto", torch.device("cpu")) == torch.float32


@cuda
@pytest.mark.gpu
def test_bf16_rollout_on_cuda(tiny_model_dir, cooking_games):
    from agentrl_lib.envs.pool import SerialPool
    from agentrl_lib.generation import HFGenerator
    from agentrl_lib.policy import token_forward
    from agentrl_lib.rollout import collate, rollout

    model, tok = load_policy(tiny_model_dir, device="cuda")
    assert next(model.parameters()).dtype == torch.bfloat16
    trajs, _ = rollout(HFGenerator(model, tok), tok, SerialPool(2), [cooking_games.games[0].path] * 2, max_turns=2,
                       max_new_tokens=6)
    batch = collate(trajs, tok.pad_token_id, "cuda")
    with torch.no_grad():
        out = token_forward(model, batch["input_ids"], batch["attention_mask"], batch["mask"], temperature=0.7)
    assert ((out["logprobs"] - batch["behaviour_logprobs"]).abs() * batch["mask"]).max() < 0.1  # bf16 tolerance
