"""`dream`: EAGLE's adapter (catch-up on accepted tokens with the target's true features, EAGLE-2 beam tree, shared
verifier, drafter-FLOP accounting) over DREAM's three-layer drafter (``methods.dream.head``).

On a vision-language target the drafter reads the prompt as DREAM does: its input embeddings are the target's own
(an image position's is the image's projected feature, from the prefill's embedding layer), and its context keeps
every text position and the ``visual_keep`` share of the image positions that the target's last layer attends to
most (attention received, averaged over heads and queries: DREAM's ``prune_image_tokens``), recomputed once per
prompt from that layer's input; the FLOPs of that recomputation count as useful drafter work. A text target's
prompt is read whole, embedded by the drafter (the target's embedding, frozen).
"""

from __future__ import annotations

import torch

from harness.backend.forward import LMOutput
from harness.backend.models import LoadedModel
from harness.engine.adapter import AdapterBase, StepContext
from harness.engine.counters import count_useful_drafter_flops
from harness.engine.method_spec import BuildInputs
from harness.trees.beam_shape import BeamShape
from methods.dream import DreamOptions
from methods.dream.attention import attention_flops, attention_received, language_layers
from methods.dream.checkpoint import load_dream
from methods.dream.head import DreamHead
from methods.eagle.adapter import EagleAdapter


def kept_positions(prompt: torch.Tensor, image_token: int, importance: torch.Tensor, keep: float) -> torch.Tensor:
    """The prompt's text positions and the ``keep`` share (at least one) of its image positions of highest
    ``importance``, in order."""
    image = (prompt == image_token).nonzero().flatten()
    if not image.numel():
        return torch.arange(prompt.shape[0], device=prompt.device)
    count = max(1, int(image.numel() * keep))
    chosen = image[importance.to(prompt.device)[image].topk(count).indices]
    keep_mask = prompt != image_token
    keep_mask[chosen] = True
    return keep_mask.nonzero().flatten()


class DreamAdapter(EagleAdapter):
    """The `dream` adapter (see the module docstring)."""

    batch_row = AdapterBase.batch_row  # one request at a time

    def __init__(self, head: DreamHead, target: LoadedModel, shape: BeamShape, visual_keep: float) -> None:
        super().__init__(head, target, shape)
        self.image_token = getattr(target.model.config, "image_token_index", None)  # None: a text target
        self.visual_keep = visual_keep
        self.last_layer: tuple[torch.nn.Module, torch.nn.Module] | None = None  # what compression reads
        if self.image_token is not None:
            self.target_hidden_layers = (0, -1)  # the prompt's embeddings (an image's features) and the last state
            if visual_keep < 1:
                layers, rotary = language_layers(target.model)
                self.last_layer = (layers[-1], rotary)
                self.target_hidden_layers = (0, -2, -1)  # and the last layer's input, whose attention ranks the image
        self.details.update({"visual_keep": visual_keep, "drafter_layers": 3})
        self.prompt_embeds = torch.empty(0, device=self.runner.device)

    def head_positions(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> torch.Tensor | None:
        self.prompt_embeds = torch.empty(0, device=self.runner.device)
        if self.image_token is None:
            return None
        prompt = prompt_ids[0].to(self.runner.device)
        if self.visual_keep < 1 and bool((prompt == self.image_token).any()):
            with ctx.counters.phase("drafter"):
                importance = attention_received(*self.last_layer, prefill.hidden_states[-2][0])
            flops = attention_flops(self.last_layer[0], prompt.shape[0])
            ctx.counters.drafter.add(0, flops)
            count_useful_drafter_flops(ctx.counters, flops)
            kept = kept_positions(prompt, self.image_token, importance, self.visual_keep)
        else:
            kept = torch.arange(prompt.shape[0], device=prompt.device)
        self.prompt_embeds = prefill.hidden_states[0][0, kept]
        return kept

    def head_embeds(self, start: int, tokens: torch.Tensor) -> torch.Tensor | None:
        """The target's prompt embeddings for the head's kept prompt positions (an image's projected features),
        the head's own embedding after them."""
        stop = self.prompt_embeds.shape[0]
        if start >= stop:
            return None
        prompt = self.prompt_embeds[start : start + tokens.shape[0]]
        rest = self.head.embed_tokens(tokens[prompt.shape[0]:]).to(prompt.dtype)
        return torch.cat([prompt, rest])


def build(options: DreamOptions, inputs: BuildInputs) -> DreamAdapter:
    target = inputs.target
    return DreamAdapter(load_dream(inputs.drafter_dir, target.model), target, options.shape(), options.visual_keep)
