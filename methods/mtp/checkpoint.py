"""MTP drafter directories: ours (``methods.mtp.head``) and released MTP layers in MiMo's layout (vLLM's
``mimo_mtp``, Xiaomi's MiMo-7B), read as our modules.

MiMo ships its MTP layers inside the model's own checkpoint: ``config.json`` says ``num_nextn_predict_layers`` and
the weights (``model.safetensors`` or shards named by ``model.safetensors.index.json``) hold, per layer i,
``model.mtp_layers.{i}.{token_layernorm, hidden_layernorm, input_proj, final_layernorm}.weight`` and a Qwen2 decoder
layer's weights under the same prefix (``input_layernorm``, ``self_attn.{q,k,v,o}_proj`` with q/k/v biases,
``post_attention_layernorm``, ``mlp.{gate,up,down}_proj``). The layer computes
final_layernorm(block(input_proj([hidden_layernorm(h); token_layernorm(e)]))) with h the main model's last state
BEFORE its final norm, e the embedding of the next token (zeroed at position 0), and the shared LM head after it.

As our modules: ``enorm`` = token_layernorm; ``hnorm`` = a per-channel scale hidden_layernorm / the target's final
norm (``FinalNormRescale``: exact, since the engine feeds the normed state); ``eh_proj`` = input_proj with its two
column halves swapped (ours reads [e; h]); ``layer`` = the Qwen2 layer (q/k/v biases); ``head_norm`` =
final_layernorm. The target must be the main model the layers were trained with (MiMo's is Qwen2-shaped). A
missing weight, a target whose final norm has a zero weight, or sliding-window attention stops with one line.
DeepSeek-V3's own MTP layer (MLA attention, MoE) has no Llama-layer equivalent and is not read.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open
from transformers import PreTrainedModel

from harness.errors import DraftcountError
from harness.store.drafter_meta import META_FILE
from harness.store.files import check_safetensors, read_json
from harness.training.drafters import check_target_fit, check_weights, drafter_directory, head_config
from methods.mtp.head import MtpHead, load_mtp

MIMO_PREFIX = "model.mtp_layers."
MIMO_OWN = {"token_layernorm.weight": "enorm.weight", "final_layernorm.weight": "head_norm.weight"}
MIMO_SPECIAL = ("hidden_layernorm.weight", "input_proj.weight")


def is_mimo_directory(directory: Path) -> bool:
    """A model directory whose config.json says it carries MTP layers (and which is not ours)."""
    config = directory / "config.json"
    return (not (directory / META_FILE).is_file() and config.is_file()
            and int(read_json(config, "model config").get("num_nextn_predict_layers", 0) or 0) > 0)


def mimo_weights(directory: Path) -> dict[str, torch.Tensor]:
    """Every ``model.mtp_layers.*`` tensor of the directory's safetensors (one file or an index's shards)."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        files = sorted({name for key, name in read_json(index, "safetensors index")["weight_map"].items()
                        if key.startswith(MIMO_PREFIX)})
    else:
        files = ["model.safetensors"] if (directory / "model.safetensors").is_file() else []
    check_safetensors(directory, "MTP weights")
    weights = {}
    for name in files:
        with safe_open(str(directory / name), framework="pt") as handle:
            weights.update({key: handle.get_tensor(key) for key in handle.keys() if key.startswith(MIMO_PREFIX)})
    if not weights:
        raise DraftcountError(f"MTP layers {directory}: no {MIMO_PREFIX}* weights in its safetensors")
    return weights


def final_norm_weight(target: PreTrainedModel, label: str) -> torch.Tensor:
    norm = getattr(target.get_decoder(), "norm", None)
    if norm is None or getattr(norm, "weight", None) is None:
        raise DraftcountError(f"{label}: the target has no final RMSNorm weight (model.norm) to rescale by")
    weight = norm.weight.detach().float().cpu()
    if bool((weight == 0).any()):
        raise DraftcountError(f"{label}: the target's final norm has zero weights; MiMo's pre-norm input cannot be "
                              "recovered from its normed state")
    return weight


def mimo_state(weights: dict[str, torch.Tensor], layers: int, hidden: int, w_final: torch.Tensor,
               label: str) -> dict[str, torch.Tensor]:
    """Our ``blocks.{i}.*`` state from MiMo's ``model.mtp_layers.{i}.*`` tensors (see the module docstring)."""
    state: dict[str, torch.Tensor] = {}
    missing = []
    for i in range(layers):
        theirs = {key[len(f"{MIMO_PREFIX}{i}."):]: value for key, value in weights.items()
                  if key.startswith(f"{MIMO_PREFIX}{i}.")}
        missing += [f"{MIMO_PREFIX}{i}.{name}" for name in (*MIMO_OWN, *MIMO_SPECIAL) if name not in theirs]
        if missing:
            continue
        ours = f"blocks.{i}."
        state.update({ours + MIMO_OWN[name]: theirs[name] for name in MIMO_OWN})
        state[ours + "hnorm.weight"] = (theirs["hidden_layernorm.weight"].float() / w_final).to(
            theirs["hidden_layernorm.weight"].dtype)
        projection = theirs["input_proj.weight"]
        state[ours + "eh_proj.weight"] = torch.cat([projection[:, hidden:], projection[:, :hidden]], dim=1)
        state.update({ours + "layer." + name: value for name, value in theirs.items()
                      if name not in MIMO_OWN and name not in MIMO_SPECIAL and not name.endswith("inv_freq")})
    if missing:
        raise DraftcountError(f"{label}: lacks {', '.join(missing[:4])}")
    return state


def load_mimo(directory: Path, target: PreTrainedModel) -> MtpHead:
    """MiMo's MTP layers in ``directory`` as our modules for ``target`` (its main model), in eval mode."""
    label = f"MTP layers {directory}"
    fields = read_json(directory / "config.json", "model config")
    if fields.get("use_sliding_window"):
        raise DraftcountError(f"{label}: sliding-window attention is not supported")
    vocab = int(target.get_output_embeddings().weight.shape[0])
    config = head_config(target.config, vocab)
    config.qkv_bias = True  # a Qwen2 layer: q/k/v biases, none on o_proj
    check_target_fit(label, int(fields.get("hidden_size", config.hidden_size)),
                     int(fields.get("vocab_size", vocab)), target)
    layers = int(fields["num_nextn_predict_layers"])
    state = mimo_state(mimo_weights(directory), layers, config.hidden_size, final_norm_weight(target, label), label)
    head = MtpHead(config, layers, hidden_input="rescale", zero_first_embedding=True)
    check_weights(head, state, label, frozenset({"embed_tokens.weight"}))
    head.load_state_dict({**state, "embed_tokens.weight": target.get_input_embeddings().weight.detach().cpu()})
    return head.eval()


def load_mtp_drafter(source: str | Path, target: PreTrainedModel) -> MtpHead:
    """An MTP drafter for ``target``: trained here, or MiMo's released layers (see the module docstring)."""
    directory = drafter_directory(source)
    return load_mimo(directory, target) if is_mimo_directory(directory) else load_mtp(directory, target)
