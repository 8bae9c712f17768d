"""Token streams for LM training: documents -> [BOS] tokens [EOS] ... as one flat tensor; random windows."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase

from harness.store.atomic import atomic_path
from harness.store.files import load_tensor
from harness.data.corpus import Document


def tokenize_documents(tokenizer: PreTrainedTokenizerBase, documents: list[Document]) -> torch.Tensor:
    """One int32 tensor: every document as BOS + its tokens + EOS, concatenated."""
    backend = tokenizer.backend_tokenizer
    encodings = backend.encode_batch([doc.text for doc in documents], add_special_tokens=False)
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    pieces = []
    for encoding in encodings:
        pieces.append(torch.tensor(([bos] if bos is not None else []) + encoding.ids + [eos], dtype=torch.int32))
    return torch.cat(pieces)


def save_tokens(path: Path, tokens: torch.Tensor) -> None:
    with atomic_path(path) as partial:
        torch.save(tokens, partial)


def load_tokens(path: Path) -> torch.Tensor:
    """A token stream ``save_tokens`` wrote; one line naming the file when it is corrupt or truncated."""
    return load_tensor(path, "token stream")


def random_windows(tokens: torch.Tensor, batch_size: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """``batch_size`` windows of ``length`` tokens at random offsets (long tensor)."""
    if tokens.numel() <= length:
        raise ValueError(f"token stream of {tokens.numel()} tokens is shorter than one window of {length}")
    starts = torch.randint(0, tokens.numel() - length, (batch_size,), generator=generator)
    return torch.stack([tokens[start : start + length] for start in starts.tolist()]).long()


def even_windows(tokens: torch.Tensor, count: int, length: int) -> torch.Tensor:
    """``count`` windows spread evenly over the stream (deterministic evaluation data)."""
    if tokens.numel() <= length:
        raise ValueError(f"token stream of {tokens.numel()} tokens is shorter than one window of {length}")
    last = tokens.numel() - length
    starts = torch.linspace(0, last, count).long().tolist()
    return torch.stack([tokens[start : start + length] for start in starts]).long()
