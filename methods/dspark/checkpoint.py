"""DSpark drafter directories: DeepSpec's released layout (``deepseek-ai/dspark_qwen3_8b_block7``), and ours.

config.json: the Qwen3 fields of the drafter's layers, ``block_size``, ``mask_token_id``, ``target_layer_ids``
(top level), ``markov_rank``, ``markov_head_type`` (only ``vanilla`` is built), ``enable_confidence_head``,
``confidence_head_with_markov``, and ours ``confidence_temperatures`` (the fitted T_k). Weights: the DFlash
backbone's (``methods.dflash.checkpoint``), ``markov_head.markov_w1.weight``, ``markov_head.markov_w2.weight``,
``confidence_head.proj.{weight,bias}``; the frozen copies of the target's ``embed_tokens``/``lm_head`` DeepSpec
ships are not read (the target's are used).
"""

from __future__ import annotations

from pathlib import Path

from transformers import PreTrainedModel

from harness.errors import DraftcountError
from methods.dflash.checkpoint import drafter_config, load_weights, read_backbone, save_drafter
from methods.dspark.model import DSparkDrafter

MARKOV_HEADS = ("vanilla",)


def build_dspark(config, target_layer_ids, mask_token_id, target_hidden, anchor_predicts,
                 draft_vocab=None) -> DSparkDrafter:
    kind = getattr(config, "markov_head_type", "vanilla") or "vanilla"
    if kind not in MARKOV_HEADS:
        raise DraftcountError(f"dspark drafter: markov_head_type {kind!r} is not built here (only "
                              f"{', '.join(MARKOV_HEADS)})")
    return DSparkDrafter(config, target_layer_ids, mask_token_id, target_hidden, True, draft_vocab)


def load_dspark(source: str | Path, target: PreTrainedModel) -> DSparkDrafter:
    """A DSpark drafter (DeepSpec's or trained here) for ``target``, in eval mode."""
    files, drafter = read_backbone(source, target, "dspark", build_dspark)
    load_weights(drafter, files, f"dspark drafter {files.directory}")
    return drafter.eval()


def save_dspark(drafter: DSparkDrafter, out_dir: Path, provenance: dict) -> None:
    """Our layout: DeepSpec's fields (top level) beside z-lab's ``dflash_config``, + our metadata."""
    config = drafter_config(drafter)
    config.architectures = ["Qwen3DSparkModel"]
    config.mask_token_id = drafter.mask_token_id
    config.target_layer_ids = list(drafter.target_layer_ids)
    config.markov_rank = drafter.markov_rank
    config.markov_head_type = "vanilla"
    config.enable_confidence_head = drafter.confidence_head is not None
    config.confidence_head_with_markov = drafter.with_markov
    config.confidence_temperatures = [float(value) for value in drafter.temperatures]
    save_drafter(drafter, out_dir, provenance, "dspark", {"confidence_temperatures": config.confidence_temperatures},
                 config)
