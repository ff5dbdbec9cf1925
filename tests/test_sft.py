"""SFT on walkthroughs (agentrl_lib/sft.py): the expert examples and their loss mask."""

import pytest


def test_sft_examples_show_the_inventory_and_admissible_commands_when_asked(tokenizer, cooking_games):
    from agentrl_lib.prompts import ChatFormat
    from agentrl_lib.sft import expert_examples

    chat = ChatFormat(tokenizer)
    plain = expert_examples(cooking_games, chat)
    shown = expert_examples(cooking_games, chat, show_admissible=True, show_inventory=True)
    text = tokenizer.decode(shown[0]["input_ids"])
    assert "Inventory:" in text and "Admissible commands:" in text
    assert "Inventory:" not in tokenizer.decode(plain[0]["input_ids"])
    # the loss mask still covers exactly the walkthrough's actions
    assert sum(shown[0]["assistant_masks"]) == sum(plain[0]["assistant_masks"])


@pytest.mark.trains
def test_micro_batches_make_the_same_sft_step(tiny_model_dir, cooking_games, tmp_path):
    """--micro-batch-size 1 accumulates one step of 3 walkthroughs over 3 passes: the weights equal one pass of 3
    up to float rounding. Control: 3 steps of 1 walkthrough (another optimisation) end elsewhere."""
    import torch
    from transformers import AutoModelForCausalLM

    from agentrl_lib.sft import sft

    def weights(batch, micro, name):
        s = sft(tiny_model_dir, cooking_games, tmp_path / name, lr=1e-3, batch_size=batch, micro_batch_size=micro,
                device="cpu", dtype="float32")
        model = AutoModelForCausalLM.from_pretrained(tmp_path / name / "policy")
        return s, torch.cat([p.detach().flatten() for p in model.parameters()])

    (one, w_one), (micro, w_micro), (_, w_small) = (weights(3, None, "one"), weights(3, 1, "micro"),
                                                   weights(1, None, "small"))
    assert one["micro_batch_size"] == 3 and micro["micro_batch_size"] == 1 and len(micro["train_loss"]) == 1
    moved = (w_one - w_small).abs().max().item()
    assert (w_one - w_micro).abs().max().item() < 1e-3 * moved and moved > 1e-4
    for bad in (2, 0, -1):
        with pytest.raises(ValueError, match="must be >= 1 and divide"):
            sft(tiny_model_dir, cooking_games, tmp_path / "bad", batch_size=3, micro_batch_size=bad)


def test_sft_refuses_an_rl_run_directory_before_anything_loads(tmp_path, monkeypatch):
    """sft() itself, not only `agentrl sft`, refuses to write into an RL run directory (config.yaml there), before any
    model loads. Control: a new directory passes the check and reaches the model load (planted to fail)."""
    from agentrl_lib import sft as sft_mod
    from agentrl_lib.config import ConfigError

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("train: {}\n")

    def no_load(*a, **k):
        raise RuntimeError("the model loaded")

    monkeypatch.setattr(sft_mod, "load_policy", no_load)
    with pytest.raises(ConfigError, match="is an RL run directory"):
        sft_mod.sft("embedded", [], run)
    with pytest.raises(RuntimeError, match="the model loaded"):
        sft_mod.sft("embedded", [], tmp_path / "new")


def test_sft_refuses_bf16_where_the_hardware_has_none_before_loading(monkeypatch, tmp_path):
    """As the RL Trainer does (hardware.bf16_problem): one ConfigError, nothing loaded. Control: where the hardware has
    bf16 the check lets the run through (to the model load, stopped here by a sentinel)."""
    from agentrl_lib import sft as sft_mod
    from agentrl_lib.config_values import ConfigError

    class Loaded(Exception):
        pass

    def load(*a, **k):
        raise Loaded

    monkeypatch.setattr(sft_mod, "load_policy", load)
    monkeypatch.setattr(sft_mod, "bf16_problem", lambda device: "this CPU has no avx512_bf16 / amx_bf16")
    with pytest.raises(ConfigError, match="no avx512_bf16.*use --mixed-precision no"):
        sft_mod.sft("embedded", [], tmp_path / "out", mixed_precision="bf16")
    monkeypatch.setattr(sft_mod, "bf16_problem", lambda device: None)
    with pytest.raises(Loaded):
        sft_mod.sft("embedded", [], tmp_path / "out", mixed_precision="bf16")
    with pytest.raises(Loaded):   # 'no' never asks
        monkeypatch.setattr(sft_mod, "bf16_problem", lambda device: pytest.fail("asked without bf16"))
        sft_mod.sft("embedded", [], tmp_path / "out", mixed_precision="no")
