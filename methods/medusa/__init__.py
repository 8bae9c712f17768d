"""`medusa`: Medusa heads (Cai et al. 2024, arXiv 2401.10774) and, with a drafter trained ``hydra: true``, Hydra
heads (Ankner et al. 2024, arXiv 2402.05109).

K heads on the target's last hidden state h_p (the state whose LM head chose the root x_{p+1}): head k predicts
x_{p+1+k}. A Medusa head sees h_p alone, so one pass of every head drafts all depths; a Hydra head also sees the
target's embeddings of the tokens drafted above it (the root and its path), so it is evaluated per tree node.

The tree: by default it grows by cumulative head log-probability (``harness.trees.beam``, EAGLE-2's
expand-and-rerank, at most ``depth`` <= K levels). With ``choices`` it is Medusa's static tree
(``harness.trees.choices``): ``calibrated`` builds Medusa's calibrated tree of ``budget`` nodes at most ``depth``
deep from the heads' per-rank accuracies, measured on held-out data when the drafter was trained (ranks up to 10,
whatever ``top_k``); a path to a JSON file uses the choice set it holds (Medusa's format, e.g. its
``mc_sim_7b_63`` pasted into a file), and then ``depth``, ``budget`` and ``top_k`` play no part.

model: the heads (Medusa's residual block, W1 zero-initialised, and its own LM head per head started from the
target's); adapter: drafting; training: the trainer (self-distillation on the target's distributions, teacher
forcing for Hydra); cost: the 8B-shape projection's cost model.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.trees.beam_shape import BeamOptions


@dataclass(frozen=True)
class MedusaOptions(BeamOptions):
    """The tree's shape (top_k, depth, budget, shape_file) or its static ``choices``; the heads' count and kind
    come with the drafter, and a depth beyond its heads is refused when the adapter is built."""

    choices: str = ""  # "": beam-grown trees; "calibrated": Medusa's calibrated tree; else a tree-choices JSON file
