"""What a measurement that runs one method over a prompt set loads from its command line (the arguments:
``harness.engine.arguments``), and the variants of the checks that measure several methods."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from transformers import LlamaConfig, LlamaForCausalLM

from harness.backend.models import LoadedModel, load_model, random_llama
from harness.data.token_streams import save_tokens
from harness.data.prompts import Prompt, encode_turn, load_prompts
from harness.engine.adapter import DraftAdapter
from harness.engine.method_spec import BuildInputs, build_adapter, method_spec
from harness.catalog import entry
from harness.errors import DraftcountError
from harness.options import parse_key_values
from harness.training.drafters import DrafterTrainRequest
from harness.engine.arguments import checked_run_arguments
from harness.verify.sampling import SamplingConfig


@dataclass
class MethodRun:
    target: LoadedModel
    adapter: DraftAdapter
    prompts: list[Prompt]
    sampling: SamplingConfig

    def prompt_ids(self, prompt: Prompt) -> torch.Tensor:
        # host: prompt ids, moved by generate
        return torch.tensor([encode_turn(self.target.tokenizer, [], prompt.turns[0])])


def load_method_run(args: argparse.Namespace) -> MethodRun:
    """The target, the method's adapter and the prompts the arguments name."""
    sampling = checked_run_arguments(args)  # the numbers and the prompts before any model loads
    prompts = load_prompts(args.prompts, None, args.limit)
    if args.threads:
        torch.set_num_threads(args.threads)
    target = load_model(args.target, args.dtype, args.device)
    draft = load_model(args.draft, args.dtype, args.device) if args.draft else None
    adapter, _ = build_adapter(args.method, parse_key_values(args.opt),
                               BuildInputs(target, draft, Path(args.drafter) if args.drafter else None))
    return MethodRun(target, adapter, prompts, sampling)


# The checks that measure several methods at once (overheads, host-sync): each method as a variant of the
# workflow's plan (``--variant JSON``, from ``harness.workflow_jobs.check_variant_arguments``), or a default table.

@dataclass(frozen=True)
class VariantSpec:
    """A named method with its options and, for a method that needs one, its trained drafter directory."""

    name: str
    method: str
    options: dict
    drafter: str | None = None


def add_variant_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--variant", action="append", metavar="JSON",
                        help='a variant to measure, repeatable: {"name": ..., "method": ..., "options": {...}, '
                             '"drafter": DIR} (default: the built-in table, for the models given)')


def parse_variants(texts: list[str] | None) -> list[VariantSpec]:
    """``--variant`` arguments as specs; one line for a malformed one."""
    specs = []
    for text in texts or []:
        try:
            fields = json.loads(text)
            specs.append(VariantSpec(str(fields["name"]), str(fields["method"]), dict(fields.get("options") or {}),
                                     fields.get("drafter")))
        except (ValueError, KeyError, TypeError) as error:
            raise DraftcountError(f"--variant {text!r} is not a variant (JSON with name and method): {error}") from None
    return specs


def table_variants(table: dict[str, tuple[str, dict]], with_draft: bool,
                   drafters: dict[str, str | None]) -> tuple[list[VariantSpec], dict[str, str]]:
    """A measurement's built-in table (name -> (method, options)) as variants: those whose models are given (a
    draft LM, ``drafters[method]`` for a trained drafter, as the catalog says the method needs), and for each of
    the others what it lacks."""
    given, lacking = [], {}
    for name, (method, options) in table.items():
        item = entry(method)
        if item.needs_draft and not with_draft:
            lacking[name] = "draft LM"
        elif item.needs_drafter and drafters.get(method) is None:
            lacking[name] = "drafter"
        else:
            given.append(VariantSpec(name, method, options, drafters.get(method)))
    return given, lacking


def build_variant(spec: VariantSpec, target: LoadedModel, draft: LoadedModel | None) -> DraftAdapter:
    adapter, _ = build_adapter(spec.method, spec.options,
                               BuildInputs(target, draft, Path(spec.drafter) if spec.drafter else None))
    return adapter


def save_random_models(root: Path, drafted_by: list[str], vocab: int = 512) -> dict[str, Path]:
    """A random 4-layer target (``root/target``), a random 2-layer draft LM (``root/draft``), a token stream and the
    drafters of ``drafted_by`` fresh from their trainers (0 steps): what a step does depends on the shapes a method
    drafts, not on what its drafter learned. The drafters' directories, by method."""
    def llama(layers: int, hidden: int, seed: int) -> LlamaForCausalLM:
        return random_llama(LlamaConfig(
            vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
            num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=1024, tie_word_embeddings=False,
            bos_token_id=None, eos_token_id=None, pad_token_id=None), seed)

    llama(4, 128, 0).save_pretrained(root / "target")
    llama(2, 64, 1).save_pretrained(root / "draft")
    host = torch.Generator(device="cpu").manual_seed(0)  # host: a token stream on disk, the same on every machine
    save_tokens(root / "tokens.pt", torch.randint(0, vocab, (4096,), generator=host))  # host: saved, not computed
    for method in drafted_by:
        method_spec(method).train(DrafterTrainRequest(method=method, target=str(root / "target"),
                                                      data=root / "tokens.pt", out=root / method, steps=0,
                                                      progress=False, options={"seq_len": "64"}))
    return {method: root / method for method in drafted_by}
