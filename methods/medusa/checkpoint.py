"""Medusa drafter directories: ours, and the layout Medusa's released heads ship (FasterDecoding/Medusa).

Ours: ``model.safetensors`` (``blocks.<k>.{weight,bias}``, ``lm_heads.<k>.weight``) and our metadata (the arch).
Released: ``config.json`` with ``medusa_num_heads`` and ``medusa_num_layers`` (and the base model's name), and
``medusa_lm_head.safetensors`` or ``medusa_lm_head.pt``: head k is ``nn.Sequential(ResBlock x medusa_num_layers,
Linear(hidden, vocab))`` where the one ResBlock instance is repeated, so its weights are ``<k>.0.linear.{weight,
bias}`` and its LM head ``<k>.<medusa_num_layers>.weight``. A missing weight, a weight of the wrong shape or heads
built for another target stop with one line. Heads trained here with held-out data carry their per-rank accuracies
(``CALIBRATION``) as ``MedusaHeads.rank_accuracy``; released ones do not (None).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch
from torch import nn

from harness.errors import DraftcountError
from harness.store.drafter_meta import META_FILE
from harness.training.draft_vocab import DraftVocab
from harness.store.files import load_weights, read_json
from harness.training.drafters import check_target_fit, check_weights, drafter_directory, read_drafter, write_drafter
from methods.medusa.model import MedusaArch, MedusaHeads

RELEASED_WEIGHTS = ("medusa_lm_head.safetensors", "medusa_lm_head.pt")
CALIBRATION = "heldout_rank_accuracy_by_head"  # our metadata: per head, its accuracy at ranks 1-10 (training)


def save_heads(heads: MedusaHeads, out_dir: Path, provenance: dict) -> None:
    meta = {"arch": asdict(heads.arch), "trainable_parameters": heads.trainable_parameters(), **provenance}
    write_drafter(out_dir, "medusa", heads.state_dict(), meta, vocab=heads.draft_vocab)


def released_heads(directory: Path) -> tuple[MedusaArch, dict[str, torch.Tensor]]:
    """The arch and our state dict of a released Medusa directory (see the module docstring)."""
    label = f"Medusa heads {directory}"
    fields = read_json(directory / "config.json", "Medusa config") if (directory / "config.json").is_file() else {}
    if "medusa_num_heads" not in fields:
        raise DraftcountError(f"{label}: config.json lacks medusa_num_heads (not a released Medusa directory)")
    heads, layers = int(fields["medusa_num_heads"]), int(fields.get("medusa_num_layers", 1))
    path = next((directory / name for name in RELEASED_WEIGHTS if (directory / name).is_file()), None)
    if path is None:
        raise DraftcountError(f"{label} holds no weights ({' or '.join(RELEASED_WEIGHTS)})")
    released = load_weights(path, "Medusa weights")
    state, missing = {}, []
    for k in range(heads):
        pairs = ((f"blocks.{k}.weight", f"{k}.0.linear.weight"), (f"blocks.{k}.bias", f"{k}.0.linear.bias"),
                 (f"lm_heads.{k}.weight", f"{k}.{layers}.weight"))
        for ours, theirs in pairs:
            if theirs in released:
                state[ours] = released[theirs]
            else:
                missing.append(theirs)
    if missing:
        raise DraftcountError(f"{label}: {path.name} lacks {', '.join(missing[:4])}")
    weight = state["lm_heads.0.weight"]
    return MedusaArch(int(weight.shape[1]), int(weight.shape[0]), heads, hydra=False, own_lm_heads=True,
                      block_repeats=layers), state


def load_heads(source: str | Path, target_model: nn.Module) -> MedusaHeads:
    """Medusa or Hydra heads for ``target_model`` (trained here, or Medusa's released layout), in eval mode."""
    directory = drafter_directory(source)
    calibration, label = None, f"Medusa heads {directory}"
    if not (directory / META_FILE).is_file() and any((directory / name).is_file() for name in RELEASED_WEIGHTS):
        arch, state = released_heads(directory)
        vocab = DraftVocab(arch.vocab_size)
    else:
        files = read_drafter(directory, "medusa", with_config=False)
        arch, state, calibration = MedusaArch(**files.meta["arch"]), files.state, files.meta.get(CALIBRATION)
        vocab = files.draft_vocab(arch.vocab_size, label)
    check_target_fit(label, arch.hidden_size, arch.vocab_size, target_model)
    heads = MedusaHeads(arch, vocab)
    check_weights(heads, state, label)
    heads.load_state_dict(state)
    heads.rank_accuracy = calibration
    return heads.eval()
