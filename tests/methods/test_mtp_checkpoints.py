"""Released MTP layers in MiMo's layout (vLLM's ``mimo_mtp``) read as our `mtp` modules: the logits equal the
released layer's forward (restated below from its module structure, reading the target's state before its final
norm, transformers' Qwen2 layer inside), `mtp` over them keeps `ar`'s output, and a broken directory is one line."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import Qwen2Config, Qwen2ForCausalLM
from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer, Qwen2RMSNorm, Qwen2RotaryEmbedding

from harness import SamplingConfig
from harness.backend.models import load_model
from harness.engine.adapter import NoDrafts
from harness.engine.loop import generate
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.errors import DraftcountError
from methods.mtp.checkpoint import load_mtp_drafter
from tests.helpers import markov_batches

VOCAB, HIDDEN = 48, 32


class ReleasedMtpLayer(nn.Module):
    """MiMo's MTP layer as released: [hidden_layernorm(h); token_layernorm(e)] -> input_proj -> a Qwen2 decoder
    layer -> final_layernorm, h the main model's state before its final norm, e zeroed at position 0."""

    def __init__(self, config: Qwen2Config) -> None:
        super().__init__()
        self.token_layernorm = Qwen2RMSNorm(HIDDEN, eps=config.rms_norm_eps)
        self.hidden_layernorm = Qwen2RMSNorm(HIDDEN, eps=config.rms_norm_eps)
        self.input_proj = nn.Linear(2 * HIDDEN, HIDDEN, bias=False)
        self.mtp_block = Qwen2DecoderLayer(config, layer_idx=0)
        self.final_layernorm = Qwen2RMSNorm(HIDDEN, eps=config.rms_norm_eps)
        self.rotary = Qwen2RotaryEmbedding(config)

    def forward(self, embeds: torch.Tensor, pre_norm: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        embeds = embeds.masked_fill((positions == 0)[..., None], 0.0)
        hidden = self.input_proj(torch.cat([self.hidden_layernorm(pre_norm), self.token_layernorm(embeds)], dim=-1))
        out = self.mtp_block(hidden, attention_mask=None, position_ids=positions,
                             position_embeddings=self.rotary(hidden, positions))
        return self.final_layernorm(out[0] if isinstance(out, tuple) else out)

    def released_state(self, index: int) -> dict[str, torch.Tensor]:
        """Its weights under MiMo's names (the decoder layer's without vLLM's ``mtp_block.`` prefix)."""
        return {f"model.mtp_layers.{index}.{name.removeprefix('mtp_block.')}": tensor.clone()
                for name, tensor in self.state_dict().items() if not name.startswith("rotary")}


def _randomize_norms(module: nn.Module, generator: torch.Generator) -> None:
    with torch.no_grad():
        for norm in [m for m in module.modules() if isinstance(m, Qwen2RMSNorm)]:
            norm.weight.copy_(0.5 + torch.rand(norm.weight.shape, generator=generator))


@pytest.fixture(scope="module")
def mimo(tmp_path_factory):
    """A tiny Qwen2 main model with one MTP layer in its checkpoint, as MiMo ships it, and the reference layer."""
    directory = tmp_path_factory.mktemp("mimo")
    config = Qwen2Config(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         tie_word_embeddings=False, rms_norm_eps=1e-6)
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    model = Qwen2ForCausalLM(config).eval()
    layer = ReleasedMtpLayer(config).eval()
    _randomize_norms(model, generator)
    _randomize_norms(layer, generator)
    model.save_pretrained(directory)
    weights = {**load_file(str(directory / "model.safetensors")), **layer.released_state(0)}
    save_file(weights, str(directory / "model.safetensors"), metadata={"format": "pt"})
    fields = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**fields, "num_nextn_predict_layers": 1}))
    return load_model(str(directory), with_tokenizer=False), layer, directory


def test_the_mimo_layout_gives_the_released_layers_logits(mimo):
    target, layer, directory = mimo
    head = load_mtp_drafter(directory, target.model)
    assert head.module_count == 1 and head.hidden_input == "rescale" and head.zero_first_embedding
    tokens = torch.randint(VOCAB, (1, 12), generator=torch.Generator().manual_seed(2))
    pre_norm = []
    hook = target.model.get_decoder().norm.register_forward_pre_hook(lambda module, args: pre_norm.append(args[0]))
    with torch.no_grad():
        out = target.model(tokens, output_hidden_states=True)
        hook.remove()
        positions = torch.arange(11)[None]
        lm_head = target.model.get_output_embeddings()
        embeds = target.model.get_input_embeddings()(tokens[:, 1:])
        wanted = lm_head(layer(embeds, pre_norm[0][:, :-1], positions))
        got = lm_head(head(out.hidden_states[-1][:, :-1], tokens[:, 1:], positions))
        torch.testing.assert_close(got, wanted, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out.hidden_states[-1], target.model.get_decoder().norm(pre_norm[0]))


def test_mtp_over_the_mimo_layers_keeps_ar_output(mimo):
    target, _, directory = mimo
    greedy = SamplingConfig()
    for options in ({}, {"top_k": 3, "depth": 3, "budget": 8}):
        adapter, _ = build_adapter("mtp", options, BuildInputs(target, None, directory))
        for prompt in [row[None] for row in next(markov_batches(VOCAB, 2, 10, seed=4))]:
            result = generate(target, adapter, prompt, 16, greedy)
            assert result.output_ids == generate(target, NoDrafts(), prompt, 16, greedy).output_ids
            assert result.counters.drafter.forwards > 0


def test_a_broken_mimo_directory_is_one_line(mimo, tmp_path):
    target, _, directory = mimo
    weights = load_file(str(directory / "model.safetensors"))
    config = json.loads((directory / "config.json").read_text())
    cases = [({"num_nextn_predict_layers": 2}, None, "lacks model.mtp_layers.1.token_layernorm.weight"),
             ({"use_sliding_window": True}, None, "sliding-window attention is not supported"),
             ({}, "model.mtp_layers.0.input_proj.weight", "lacks model.mtp_layers.0.input_proj.weight"),
             ({}, "model.mtp_layers.0.self_attn.q_proj.bias", "missing weights blocks.0.layer.self_attn.q_proj.bias")]
    for case, (fields, dropped, message) in enumerate(cases):
        broken = tmp_path / f"case{case}"
        broken.mkdir()
        (broken / "config.json").write_text(json.dumps({**config, **fields}))
        save_file({key: value for key, value in weights.items() if key != dropped}, str(broken / "model.safetensors"))
        with pytest.raises(DraftcountError, match=message) as error:
            load_mtp_drafter(broken, target.model)
        assert "\n" not in str(error.value)
    norm = target.model.get_decoder().norm.weight
    saved = norm.detach().clone()
    with torch.no_grad():
        norm[3] = 0.0
    try:
        with pytest.raises(DraftcountError, match="final norm has zero weights"):
            load_mtp_drafter(directory, target.model)
    finally:
        with torch.no_grad():
            norm.copy_(saved)
