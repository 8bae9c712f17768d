"""A DREAM drafter directory: ``config.json`` (the three layers' Llama shape), ``model.safetensors`` and
``draftcount_drafter.json`` (provenance, the mid-layer candidates it was trained on). The token embedding is the
target's and is not saved; a directory of another method, a missing or unexpected weight, or a weight of the wrong
shape stops with one line."""

from __future__ import annotations

from pathlib import Path

from transformers import PreTrainedModel

from harness.errors import DraftcountError
from harness.training.drafters import check_weights, read_drafter, write_drafter
from methods.dream.head import DreamHead, LAYERS

OPTIONAL_WEIGHTS = frozenset({"embed_tokens.weight"})


def save_dream(head: DreamHead, out_dir: Path, provenance: dict) -> None:
    state = {name: tensor for name, tensor in head.state_dict().items() if name != "embed_tokens.weight"}
    write_drafter(out_dir, "dream", state, {"trainable_parameters": head.trainable_parameters(), **provenance},
                  head.config, head.draft_vocab)


def load_dream(source: str | Path, target: PreTrainedModel) -> DreamHead:
    """The DREAM drafter at ``source`` for ``target`` (its embedding the target's), in eval mode."""
    files = read_drafter(source, "dream")
    config = files.llama_config()
    label = f"DREAM drafter {files.directory}"
    embedding = target.get_input_embeddings().weight.detach().cpu()
    if config.hidden_size != embedding.shape[1]:
        raise DraftcountError(f"{label}: {config.hidden_size} wide; the target is {embedding.shape[1]}")
    if int(getattr(config, "num_hidden_layers", LAYERS)) != LAYERS:
        raise DraftcountError(f"{label}: config.json says {config.num_hidden_layers} layers; DREAM has {LAYERS}")
    config.vocab_size = int(embedding.shape[0])
    head = DreamHead(config, files.draft_vocab(config.vocab_size, label))
    check_weights(head, files.state, label, OPTIONAL_WEIGHTS)
    head.load_state_dict({**files.state, "embed_tokens.weight": embedding})
    return head.eval()
