"""Tiny models, tokenizers and statistical checks shared by the tests."""

from __future__ import annotations

import copy
import itertools
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders
from transformers import BambaConfig, BambaForCausalLM, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from harness import LoadedModel, SamplingConfig, generate
from harness.engine.adapter import AdapterBase, StepContext
from harness.engine.drafting import choose_children
from harness.backend.forward import LMOutput, positions, run_model
from harness.backend.kv_cache import cache_argument, new_cache
from harness.data.token_streams import save_tokens
from harness.verify.sampling import align_vocab, logits_to_probs, make_generator
from harness.engine.runtime import EngineOptions, EngineRuntime
from harness.trees.tree import TokenTree
from harness.verify import Verdict, verify_tree


def make_llama(vocab: int, hidden: int = 32, layers: int = 2, heads: int = 4, seed: int = 0,
               init_range: float = 0.02, context: int = 512) -> LlamaForCausalLM:
    """A random float32 Llama with no EOS (so generation always runs to max_new_tokens)."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=context,
        initializer_range=init_range, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
        pad_token_id=None,
    )
    model = LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = None
    return model


def make_bamba(vocab: int = 64, hidden: int = 32, layers: int = 3, attention: tuple[int, ...] = (1,), seed: int = 0,
               groups: int = 1, noise: float = 0.3, context: int = 512) -> BambaForCausalLM:
    """A random float32 hybrid (Bamba: Mamba2 layers, attention at ``attention``; none: a pure Mamba2 LM), its
    weights spread by ``noise`` (transformers' init leaves the Mamba2 layers near identity)."""
    torch.manual_seed(seed)
    config = BambaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, attn_layer_indices=list(attention), mamba_n_heads=4,
        mamba_d_head=hidden // 2, mamba_n_groups=groups, mamba_d_state=8, mamba_d_conv=4, mamba_expand=2,
        mamba_chunk_size=16, max_position_embeddings=context, tie_word_embeddings=False, bos_token_id=None,
        eos_token_id=None, pad_token_id=None, use_cache=False,  # (transformers' cache of a Mamba2 LM fails)
    )
    model = BambaForCausalLM(config).eval()
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * noise)
    model.generation_config.eos_token_id = None
    return model


def perturbed_copy(model: LlamaForCausalLM, noise: float, seed: int) -> LlamaForCausalLM:
    """Same architecture, weights plus Gaussian noise: a draft that often agrees with ``model``."""
    copy = LlamaForCausalLM(model.config).eval()
    copy.load_state_dict(model.state_dict())
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in copy.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * noise * parameter.std().clamp_min(1e-3))
    return copy


def markov_batches(vocab: int, batch: int, length: int, seed: int):
    """Endless batches from a fixed sparse second-order Markov chain: a language small models can learn."""
    generator = torch.Generator().manual_seed(seed)
    table = torch.randint(0, vocab, (vocab, vocab, 3), generator=generator)
    while True:
        sequence = torch.randint(0, vocab, (batch, 2), generator=generator)
        for _ in range(length - 2):
            choice = torch.randint(0, 3, (batch,), generator=generator)
            nxt = table[sequence[:, -2], sequence[:, -1], choice]
            sequence = torch.cat([sequence, nxt[:, None]], dim=1)
        yield sequence


def train_briefly(model: LlamaForCausalLM, steps: int, seed: int = 0) -> LlamaForCausalLM:
    """A few hundred AdamW steps on the Markov language (seconds on CPU)."""
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batches = markov_batches(model.config.vocab_size, 16, 48, seed)
    for _ in range(steps):
        batch = next(batches)
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@lru_cache(maxsize=8)
def _trained_markov_llama(vocab: int, hidden: int, layers: int, heads: int, seed: int, steps: int,
                          train_seed: int) -> LlamaForCausalLM:
    return train_briefly(make_llama(vocab=vocab, hidden=hidden, layers=layers, heads=heads, seed=seed), steps,
                         train_seed)


def markov_llama(vocab: int = 48, hidden: int = 48, layers: int = 3, heads: int = 4, seed: int = 2, steps: int = 150,
                 train_seed: int = 0) -> LlamaForCausalLM:
    """``train_briefly(make_llama(...), steps, train_seed)``, trained once per test process and copied to each
    caller (the same seeds give the same model, so a copy is what a fresh training would return): the Markov
    targets and draft LMs many test files train."""
    return copy.deepcopy(_trained_markov_llama(vocab, hidden, layers, heads, seed, steps, train_seed))


def save_markov_target(root: Path, layers: int = 3) -> None:
    """A briefly trained Markov-language target (vocabulary 48, width 48, ``layers`` layers) saved to
    ``root / "target"``, and a token stream of the same language at ``root / "tokens.pt"``: what a drafter trainer
    reads."""
    target_model = markov_llama(layers=layers)
    target_model.save_pretrained(root / "target")
    batches = markov_batches(48, 64, 48, seed=5)
    save_tokens(root / "tokens.pt", torch.cat([next(batches).flatten() for _ in range(4)]))


@torch.no_grad()
def greedy_stream(model, prompts: int, length: int, seed: int) -> torch.Tensor:
    """A Markov-vocabulary (48) model's greedy continuations of random 2-token prompts, flattened: text whose every
    next token, and so every k-th next token, is a function of the text before it (what parallel drafters, whose
    later drafts cannot see the earlier ones, can learn to draft)."""
    ids = torch.randint(48, (prompts, 2), generator=torch.Generator().manual_seed(seed))
    for _ in range(length - 2):
        ids = torch.cat([ids, model(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids.flatten()


def save_greedy_markov_target(root: Path):
    """``save_markov_target(root)`` with its token stream replaced by the target's own greedy text
    (``greedy_stream``); the target, loaded."""
    from harness.backend.models import load_model

    save_markov_target(root, layers=3)
    target = load_model(str(root / "target"), with_tokenizer=False)
    save_tokens(root / "tokens.pt", greedy_stream(target.model, 64, 48, seed=0))
    return target


def train_test_drafter(method: str, root: Path, name: str, steps: int, heldout: bool = False, **options: str) -> dict:
    """Train drafter ``name`` of ``method`` for ``steps`` steps on ``save_markov_target(root)``'s target and tokens
    (small batches of 48-token windows; ``options`` over those) into ``root / name``; its training metrics (with
    ``heldout``, its held-out figures on the same tokens too)."""
    from harness.engine.method_spec import method_spec
    from harness.training.drafters import DrafterTrainRequest

    request = DrafterTrainRequest(method=method, target=str(root / "target"), data=root / "tokens.pt", out=root / name,
                                  steps=steps, progress=False, heldout=root / "tokens.pt" if heldout else None,
                                  options={"seq_len": "48", "batch_size": "8", "lr": "3e-3", **options})
    return method_spec(method).train(request)


def build_tokenizer(vocab_size: int = 300) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on a few lines of text, with <eos>/<bos>."""
    text = [
        "def add(a, b):\n    return a + b\n",
        "The quick brown fox jumps over the lazy dog.",
        "for i in range(10):\n    print(i * i)\n",
        "Speculative decoding drafts tokens and the target verifies them.",
    ] * 20
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<eos>", "<bos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(text, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<eos>", bos_token="<bos>")


def save_model_dir(path: Path, model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast) -> Path:
    model.config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


class PathTreeDrafter(AdapterBase):
    """A multi-draft tree drafter for verifier tests: every node's children come from the draft LM run on its path.

    mode 'iid': children drawn independently from the draft distribution (with
    replacement, SpecInfer); 'without': drawn without replacement (each later
    sibling from q with the earlier ones removed, Sequoia); 'topk': the draft's top-b tokens, deterministic
    (q = 1, EAGLE). Each depth is one batched draft forward over all frontier
    paths (no KV cache: simple and obviously right).
    """

    wants_target_hidden_states = False

    def __init__(self, draft: LoadedModel, branching: tuple[int, ...], mode: str) -> None:
        self.draft, self.branching, self.mode = draft, branching, mode
        self.max_draft_nodes = sum(itertools.accumulate(branching, lambda a, b: a * b))

    def begin(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> None:
        pass

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        tokens, parents, probs = [sequence[0, -1]], [-1], [None]
        frontier = [(0, sequence[0])]
        for width in self.branching:
            batch = torch.stack([path for _, path in frontier])
            out = run_model(self.draft, batch, new_cache(self.draft.config),
                            positions(0, batch.shape[1], batch.device).expand(len(frontier), -1),
                            ctx.counters.drafter, logits_to_keep=1)
            logits = align_vocab(out.logits[:, -1], ctx.target_vocab_size)
            next_frontier = []
            for row, (node, path) in enumerate(frontier):
                if self.mode == "topk":  # deterministic top-k even when sampling, as EAGLE does
                    chosen = [(token, None) for token in torch.topk(logits[row], width).indices]
                else:
                    chosen = choose_children(logits[row], width, ctx, replacement=self.mode == "iid")
                for token, q in chosen:
                    tokens.append(token)
                    parents.append(node)
                    probs.append(q)
                    next_frontier.append((len(tokens) - 1, torch.cat([path, token.reshape(1)])))
            frontier = next_frontier
        return TokenTree(torch.stack(tokens), tuple(parents), probs)

    def commit(self, ctx: StepContext, tree: TokenTree, verdict: Verdict, target_out: LMOutput) -> None:
        pass


def skip_residual_verifier():
    """A deliberately wrong verifier: after a rejection it keeps sampling from p instead of norm(max(0, p - q))."""
    return partial(verify_tree, residual=lambda target, draft: target)


def exact_distribution(target: LoadedModel, prompt: list[int], length: int, sampling: SamplingConfig,
                       media: dict[str, torch.Tensor] | None = None) -> dict:
    """P(first ``length`` generated tokens) under the target, by enumerating every sequence (``media``: the
    prompt's image, given to every row)."""
    vocab = target.vocab_size
    probabilities = {(): 1.0}
    with torch.no_grad():
        for _ in range(length):
            prefixes = list(probabilities)
            if media:
                logits = logits_after_image(target, prompt, prefixes, media)
            else:
                logits = target.model(torch.tensor([prompt + list(prefix) for prefix in prefixes])).logits[:, -1]
            step = logits_to_probs(logits, sampling)
            probabilities = {
                prefix + (token,): probabilities[prefix] * float(step[row, token])
                for row, prefix in enumerate(prefixes) for token in range(vocab)
            }
    return probabilities


def logits_after_image(target: LoadedModel, prompt: list[int], prefixes: list[tuple[int, ...]],
                       media: dict[str, torch.Tensor]) -> torch.Tensor:
    """The target's next-token logits after ``prompt`` (prefilled with its image, transformers' own forward) and each
    of ``prefixes`` (decoded text-only on a copy of that cache): a generated token may equal the image placeholder,
    which a full forward with the image would take for one more patch."""
    cache = new_cache(target.config)
    first = target.model(input_ids=torch.tensor([prompt]), use_cache=True, **cache_argument(target.model, cache),
                         **media).logits[0, -1]
    rows = []
    for prefix in prefixes:
        if not prefix:
            rows.append(first)
            continue
        copied = copy.deepcopy(cache)
        positions = torch.arange(len(prompt), len(prompt) + len(prefix))[None]
        rows.append(target.model(input_ids=torch.tensor([list(prefix)]), position_ids=positions, use_cache=True,
                                 **cache_argument(target.model, copied)).logits[0, -1])
    return torch.stack(rows)


def sampled_distribution(target: LoadedModel, adapter, prompt: list[int], length: int, sampling: SamplingConfig,
                         samples: int, seed: int, verify=verify_tree,
                         media: dict[str, torch.Tensor] | None = None) -> Counter:
    counts: Counter = Counter()
    ids = torch.tensor([prompt])
    for index in range(samples):
        result = generate(target, adapter, ids, length, sampling, generator=make_generator(seed + index, "cpu"),
                          verify=verify, media=media)
        counts[tuple(result.output_ids)] += 1
    return counts


@dataclass(frozen=True)
class ChiSquare:
    """A Pearson chi-square goodness-of-fit test: its statistic, degrees of freedom and p-value, and its cells as
    (outcome, observed, expected), the outcomes expected below the pooling threshold pooled into one (outcome
    ``"pooled"``)."""

    statistic: float
    degrees: int
    pvalue: float
    cells: tuple[tuple[object, int, float], ...]

    def worst(self, count: int = 3) -> list[tuple[object, int, float]]:
        """The ``count`` cells that add the most to the statistic, (observed - expected)^2 / expected."""
        return sorted(self.cells, key=lambda cell: -(cell[1] - cell[2]) ** 2 / cell[2] if cell[2] > 0 else 0.0)[:count]

    def describe(self, count: int = 3) -> str:
        """The statistic, its p-value and the worst cells, on one line."""
        cells = ", ".join(f"{outcome}: observed {observed}, expected {expected:.1f}"
                          for outcome, observed, expected in self.worst(count))
        return (f"chi-square {self.statistic:.1f} on {self.degrees} degrees of freedom, p = {self.pvalue:.3g}; "
                f"worst cells: {cells}")


def chi_square_test(counts: Counter, probabilities: dict, min_expected: float = 5.0) -> ChiSquare:
    """Pearson chi-square goodness of fit of ``counts`` to ``probabilities``; cells expected below ``min_expected``
    are pooled into one.

    The threshold a test compares against follows from the sample size through
    the expected counts: with N samples, a cell of probability p expects N p.
    """
    samples = sum(counts.values())
    unexpected = set(counts) - set(probabilities)
    if unexpected:
        raise AssertionError(f"sampled sequences outside the support: {sorted(unexpected)[:3]}")
    cells, pooled_expected, pooled_observed = [], 0.0, 0
    for outcome, probability in probabilities.items():
        expected = samples * probability
        if expected >= min_expected:
            cells.append((outcome, counts.get(outcome, 0), expected))
        else:
            pooled_expected += expected
            pooled_observed += counts.get(outcome, 0)
    if pooled_expected > 0:
        cells.append(("pooled", pooled_observed, pooled_expected))
    statistic = sum((observed - expected) ** 2 / expected for _, observed, expected in cells if expected > 0)
    degrees = max(len(cells) - 1, 1)
    return ChiSquare(statistic, degrees, chi_square_survival(statistic, degrees), tuple(cells))


def chi_square_pvalue(counts: Counter, probabilities: dict, min_expected: float = 5.0) -> float:
    """``chi_square_test``'s p-value."""
    return chi_square_test(counts, probabilities, min_expected).pvalue


def chi_square_survival(statistic: float, degrees: int) -> float:
    """P(X >= statistic) for X chi-square with ``degrees`` degrees of freedom: the regularised upper incomplete
    gamma Q(degrees / 2, statistic / 2) (torch's, in float64; no SciPy, whose import every workflow job would pay
    through transformers)."""
    half = torch.tensor([degrees / 2, statistic / 2], dtype=torch.float64)
    return float(torch.special.gammaincc(half[0], half[1]))


ENGINE_SWITCHES = {"static": EngineOptions(kv_cache="static"),
                   "graph_buffers": EngineOptions(kv_cache="static", cuda_graphs="on")}


def engine_runtime(target: LoadedModel, switch: str) -> EngineRuntime:
    """A runtime with one of the engine's overhead switches on; the CUDA-graph path runs its static buffers
    eagerly (``capture=False``), which is what a machine without a GPU can test."""
    return EngineRuntime(target, ENGINE_SWITCHES[switch], capture=False)


def sharded_lm_loss(model: LlamaForCausalLM, tokens: torch.Tensor, batch_size: int):
    """A sharded ``train`` loss: micro-batch ``shard`` of step ``step`` is its rows of a global batch of
    ``batch_size * shard.count`` random 16-token windows of ``tokens`` (drawn from the step number)."""
    from harness.data.token_streams import random_windows
    from harness.training.loop import batches_from_step

    def loss_fn(step, shard):
        size = batch_size * shard.count
        windows = batches_from_step(step, 0, lambda g: random_windows(tokens, size, 16, g))[shard.rows(batch_size)]
        return model(input_ids=windows, labels=windows).loss, windows.numel()
    return loss_fn


GGUF_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
GGUF_MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "o n"]
GGUF_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                 "'<|im_end|>\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def byte_symbols() -> list[str]:
    """GPT-2's byte-level alphabet: the 256 symbols its BPE tokenizers start from."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = [byte for byte in range(256) if byte not in printable]
    return [chr(code) for code in printable] + [chr(256 + index) for index in range(len(shifted))]


def write_tiny_gguf(path: Path, hidden: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                    ffn: int = 128, seed: int = 0) -> Path:
    """A tiny Llama GGUF file as llama.cpp lays one out: its projections in Q4_1, norms and embedding in F32, a
    GPT-2-style BPE vocabulary (special tokens, the byte alphabet, a few merges) and a chat template."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    tokens = GGUF_SPECIAL + byte_symbols() + ["".join(merge.split()) for merge in GGUF_MERGES]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny")
    writer.add_block_count(layers)
    writer.add_context_length(256)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_1)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL] * len(GGUF_SPECIAL)
                           + [gguf.TokenType.NORMAL] * (len(tokens) - len(GGUF_SPECIAL)))
    writer.add_token_merges(GGUF_MERGES)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(GGUF_TEMPLATE)

    def tensor(name: str, shape: tuple[int, ...], quantised: bool = False) -> None:
        data = (rng.standard_normal(shape) * 0.2).astype(np.float32)
        if quantised:
            writer.add_tensor(name, gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q4_1),
                              raw_dtype=gguf.GGMLQuantizationType.Q4_1)
        else:
            writer.add_tensor(name, data)

    tensor("token_embd.weight", (len(tokens), hidden))
    for layer in range(layers):
        tensor(f"blk.{layer}.attn_norm.weight", (hidden,))
        tensor(f"blk.{layer}.ffn_norm.weight", (hidden,))
        for name, rows in (("attn_q", hidden), ("attn_k", kv_heads * hidden // heads),
                           ("attn_v", kv_heads * hidden // heads), ("attn_output", hidden)):
            tensor(f"blk.{layer}.{name}.weight", (rows, hidden), quantised=True)
        tensor(f"blk.{layer}.ffn_gate.weight", (ffn, hidden), quantised=True)
        tensor(f"blk.{layer}.ffn_up.weight", (ffn, hidden), quantised=True)
        tensor(f"blk.{layer}.ffn_down.weight", (hidden, ffn), quantised=True)
    tensor("output_norm.weight", (hidden,))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
def record_drafts(adapter) -> list[int]:
    """A list that collects every token ``adapter`` drafts from now on (its trees' nodes but the root)."""
    tokens: list[int] = []
    propose = adapter.propose

    def recording(ctx, sequence):
        tree = propose(ctx, sequence)
        tokens.extend(tree.tokens[1:].tolist())
        return tree

    adapter.propose = recording
    return tokens
ROOT = Path(__file__).resolve().parents[1]


def docs_example(text: str, heading: str, language: str = "python") -> str:
    """The first fenced ``language`` block after ``heading`` in a docs page."""
    rest = text.split(heading, 1)[1]
    return re.search(rf"```{language}\n(.*?)```", rest, re.S).group(1)


def copy_project(dest: Path) -> list[str]:
    """Copy the project's files as git sees them (tracked, and untracked but not ignored), but results/, to ``dest``:
    a project of its own, whose Snakemake lock, metadata and outputs are its own. The files copied."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    copied = [name for name in files if (ROOT / name).is_file() and not name.startswith("results/")]
    for name in copied:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest / name)
    return copied


def assert_drafts_as_eager(eager_runs: list, graphed_runs: list) -> None:
    """A graphed draft did what the eager draft does, generation by generation: the same tokens, the same accepted
    drafts, the same drafter forwards, tokens and FLOPs, the same extra counters (useful drafter FLOPs among them;
    not the measured ones, ``*_seconds``: polybasic times its stages)."""
    for eager, graphed in zip(eager_runs, graphed_runs, strict=True):
        assert graphed.output_ids == eager.output_ids
        ours, theirs = graphed.counters, eager.counters
        assert ours.step_accepted == theirs.step_accepted
        assert (ours.drafter.forwards, ours.drafter.tokens) == (theirs.drafter.forwards, theirs.drafter.tokens)
        assert ours.drafter.flops == pytest.approx(theirs.drafter.flops, rel=1e-12)
        untimed = [{key: value for key, value in run.extra.items() if not key.endswith("_seconds")}
                   for run in (ours, theirs)]
        assert untimed[0] == pytest.approx(untimed[1], rel=1e-12)


def second_token_law(target: LoadedModel, prompt: torch.Tensor, sampling: SamplingConfig) -> dict:
    """The target's law of the first two tokens after ``prompt`` (1, L) at ``sampling``: {(t1, t2): probability},
    on the model's device (the second token is the first a decoding step's verification draws)."""
    with torch.inference_mode():
        first = logits_to_probs(target.model(prompt).logits[0, -1], sampling)
        law = {}
        for token, p_first in enumerate(first.tolist()):
            if p_first > 0:
                extended = torch.cat([prompt, torch.tensor([[token]], device=prompt.device)], dim=-1)
                second = logits_to_probs(target.model(extended).logits[0, -1], sampling)
                law.update({(token, other): p_first * p for other, p in enumerate(second.tolist()) if p > 0})
    return law


def sampled_pairs_follow_the_target(target: LoadedModel, adapter, prompt: torch.Tensor, runtime, seeds: range,
                                    sampling: SamplingConfig, alpha: float = 1e-3) -> None:
    """Under ``runtime`` (graphs captured by a first pass over the seeds), the same seed gives the same tokens
    twice, and the first two tokens over ``seeds`` follow the target's law (chi-square at ``alpha``): draws that did
    not move on between graph replays would repeat one token."""
    def run(seed: int) -> list[int]:
        return generate(target, adapter, prompt, 4, sampling, runtime=runtime,
                        generator=make_generator(seed, target.device)).output_ids

    for seed in seeds[:3]:  # captures (their warm-ups draw too)
        run(seed)
    assert [run(seed) for seed in seeds[:3]] == [run(seed) for seed in seeds[:3]], "the same seed, other tokens"
    counts = Counter(tuple(run(seed)[:2]) for seed in seeds)
    pvalue = chi_square_pvalue(counts, second_token_law(target, prompt, sampling))
    assert pvalue > alpha, (f"the first two tokens do not follow the target's law: p = {pvalue:.3g}, "
                            f"{counts.most_common(3)}")
