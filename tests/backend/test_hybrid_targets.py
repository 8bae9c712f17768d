"""Hybrid targets (Mamba2 or linear-attention layers beside attention): their cache keeps recurrent state that
dropping rejected drafts cannot roll back (in FalconH1 in the same layer object as the attention keys), so every
drafting method is refused with one line and `ar` runs, matching transformers' own greedy generate. (Bamba's layout
is run over trees by ``harness.hybrid`` instead: tests/hybrid and the conformance suite's test_hybrid.)"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from harness import SamplingConfig, generate, wrap_model
from harness.backend.kv_cache import cache_argument, crop_cache, new_cache, rollback_refusal
from harness.catalog import entry, method_names
from harness.engine.adapter import NoDrafts
from harness.engine.batched import generate_batch
from harness.engine.draft_lm import DraftLMAdapter
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.engine.runtime import EngineOptions, EngineRuntime
from harness.errors import DraftcountError
from harness.trees.sequoia import branching_shape
from tests.helpers import make_bamba, make_llama

HYBRIDS = {
    # attention keys and SSM state in one cache layer (LinearAttentionAndFullAttentionLayer): the silent case
    "falcon_h1": dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=2, head_dim=16, mamba_d_ssm=32, mamba_n_heads=4, mamba_d_head=8,
                      mamba_d_state=8, mamba_n_groups=1, mamba_chunk_size=16, max_position_embeddings=128),
    # a Mamba2 layer, then a hybrid (shared attention) layer
    "zamba2": dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                   num_key_value_heads=2, attention_head_dim=16, mamba_d_state=8, mamba_headdim=8, n_mamba_heads=8,
                   mamba_ngroups=1, chunk_size=16, max_position_embeddings=128, layers_block_type=["mamba", "hybrid"],
                   hybrid_layer_ids=[1], use_mem_rope=False, initializer_range=0.5),
}
PROMPT = torch.tensor([[1, 2, 3, 4, 5]])


@pytest.fixture(scope="module", params=sorted(HYBRIDS))
def hybrid(request):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(request.param, **HYBRIDS[request.param])).eval()
    return request.param, wrap_model(model)


def test_the_refusal_names_the_recurrent_layer(hybrid):
    name, target = hybrid
    why = rollback_refusal(target.config)
    assert why is not None and "keeps recurrent state" in why, (name, why)
    assert rollback_refusal(make_llama(vocab=64, hidden=16, layers=2, heads=2, seed=0).config) is None
    assert rollback_refusal(make_bamba(vocab=64, hidden=16, layers=2).config) is None  # its TreeStateCache rolls back


def test_ar_runs_and_equals_transformers_generate(hybrid):
    _, target = hybrid
    ours = generate(target, NoDrafts(), PROMPT, 12, SamplingConfig()).output_ids
    theirs = target.model.generate(PROMPT, attention_mask=torch.ones_like(PROMPT), max_new_tokens=12,
                                   do_sample=False)[0, PROMPT.shape[1]:].tolist()
    assert ours == theirs


@pytest.mark.parametrize("method", [name for name in method_names() if entry(name).drafts])
def test_every_drafting_method_is_refused_with_one_line(hybrid, method):
    _, target = hybrid
    with pytest.raises(DraftcountError) as refused:  # before the method is built: no draft or drafter needed
        build_adapter(method, {}, BuildInputs(target, None, None))
    message = str(refused.value)
    assert "\n" not in message and f"method '{method}' drafts" in message and "keeps recurrent state" in message


def test_the_engine_refuses_a_drafting_adapter_built_by_hand(hybrid):
    _, target = hybrid
    draft = wrap_model(make_llama(vocab=64, hidden=16, layers=1, heads=2, seed=1))
    with pytest.raises(DraftcountError, match="cannot drop rejected drafts from its KV cache"):
        generate(target, DraftLMAdapter(draft, branching_shape((1, 1, 1)), False), PROMPT, 8, SamplingConfig())


def test_static_caches_and_hybrid_drafters_are_refused(hybrid):
    _, target = hybrid
    with pytest.raises(DraftcountError, match="kv_cache=dynamic"):
        EngineRuntime(target, EngineOptions(kv_cache="static"))
    llama = wrap_model(make_llama(vocab=64, hidden=16, layers=2, heads=2, seed=0))
    with pytest.raises(DraftcountError, match="drafter cannot drop rejected drafts"):  # the hybrid as draft LM
        generate(llama, DraftLMAdapter(target, branching_shape((1, 1, 1)), False), PROMPT, 8, SamplingConfig())


def test_crop_refuses_to_drop_entries_of_a_recurrent_cache(hybrid):
    _, target = hybrid
    cache = new_cache(target.config)
    with torch.no_grad():
        target.model(PROMPT, **cache_argument(target.model, cache), use_cache=True)
    length = cache.get_seq_length()
    crop_cache(cache, length)  # nothing to drop: what `ar` does each step
    with pytest.raises(DraftcountError, match="keeps recurrent state"):
        crop_cache(cache, length - 2)


def test_batches_are_refused_with_one_line(hybrid):
    """Left padding and rejected drafts are masked, not removed: a recurrent state would read them (`ar` too)."""
    _, target = hybrid
    with pytest.raises(DraftcountError, match="keeps recurrent state.*one request at a time") as refusal:
        generate_batch(target, NoDrafts(), [PROMPT, PROMPT[:, :3]], 4, SamplingConfig(), [None, None])
    assert "\n" not in str(refusal.value)
