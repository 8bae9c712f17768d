"""User questions a chat target writes itself (Magpie, Xu et al. 2024): training questions beyond the shared sets.

An aligned chat model given its chat template up to the start of a user turn's content (``user_turn_prefix``: the
template rendered around a sentinel user message and cut before it, the template's default system prompt included)
writes a plausible user question and ends it with its end-of-turn token. ``synth_questions`` samples such turns in
batches of identical prefixes (``harness.training.regenerate.answer_batch``: one cached forward per token, every row
until its end-of-turn token or ``max_tokens``) at ``temperature`` and ``top_p`` from ``seed``, checks each for form
and offers it to a ``harness.data.question_filters.QuestionSelector`` (apart from the benchmark, no exact or near
duplicate) until at least ``count`` are kept (every question of the last batch is offered) or ``max_generated``
were written.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from tqdm import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from harness.data.question_filters import FormBounds, QuestionSelector, form_problem
from harness.errors import DraftcountError
from harness.training.regenerate import answer_batch
from harness.verify.sampling import SamplingConfig, make_generator

SENTINEL = "\x00draftcount-user-turn\x00"


@dataclass(frozen=True)
class SynthOptions:
    count: int = 512          # questions to keep (at least: the last batch is kept whole)
    max_generated: int = 2048  # questions to write at most
    max_tokens: int = 96      # tokens a question may take (through its end-of-turn token)
    temperature: float = 1.0
    top_p: float = 0.95
    batch_size: int = 32
    seed: int = 0
    bounds: FormBounds = field(default_factory=FormBounds)

    def __post_init__(self) -> None:
        if min(self.count, self.max_generated, self.max_tokens, self.batch_size) < 1:
            raise DraftcountError("synth-questions needs count, max_generated, max_tokens and batch_size >= 1")
        SamplingConfig(self.temperature, top_p=self.top_p)  # one line for a bad temperature or top_p
        if self.temperature == 0:
            raise DraftcountError("synth-questions samples: a temperature of 0 writes one question over and over")


def user_turn_prefix(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The chat template's tokens up to where a user turn's content starts; one line for a template without one."""
    if not getattr(tokenizer, "chat_template", None):
        raise DraftcountError("the target has no chat template: there is no user turn to have it write")
    text = tokenizer.apply_chat_template([{"role": "user", "content": SENTINEL}], tokenize=False)
    if SENTINEL not in text:
        raise DraftcountError("the target's chat template does not show a user turn's content")
    return tokenizer(text[:text.index(SENTINEL)], add_special_tokens=False)["input_ids"]


def template_strings(tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """Every special or added token's text: none of them may be left in a question."""
    return sorted(set(tokenizer.all_special_tokens) | set(tokenizer.get_added_vocab()))


def question_text(tokenizer: PreTrainedTokenizerBase, tokens: list[int], stop_ids: frozenset[int]) -> tuple[str, bool]:
    """(the question's text, whether it ended with an end-of-turn token), that token left out."""
    ended = bool(tokens) and tokens[-1] in stop_ids
    return tokenizer.decode(tokens[:-1] if ended else tokens, skip_special_tokens=False).strip(), ended


def synth_questions(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, options: SynthOptions,
                    stop_ids: frozenset[int], selector: QuestionSelector,
                    progress: bool = True) -> tuple[list[str], dict]:
    """(the questions kept, in the order written; what was written and dropped): see the module docstring."""
    if not stop_ids:
        raise DraftcountError("the target names no end-of-turn token (eos_token_id): a question would never end")
    prefix, strings = user_turn_prefix(tokenizer), template_strings(tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(stop_ids)
    sampling, generator = SamplingConfig(options.temperature, top_p=options.top_p), make_generator(options.seed,
                                                                                                   model.device)
    kept: list[str] = []
    form: Counter = Counter()
    written = tokens = 0
    started, cpu_started = time.perf_counter(), time.process_time()
    bar = tqdm(total=options.count, desc="synth-questions", unit="q", disable=not progress)
    while len(kept) < options.count and written < options.max_generated:
        rows = min(options.batch_size, options.max_generated - written)
        for answer in answer_batch(model, [prefix] * rows, options.max_tokens, stop_ids, pad_id, sampling, generator):
            written, tokens = written + 1, tokens + len(answer)
            text, ended = question_text(tokenizer, answer, stop_ids)
            problem = form_problem(text, ended, strings, options.bounds)
            if problem is not None:
                form[problem] += 1
            elif selector.offer(text):
                kept.append(text)
                bar.update(1)
        bar.set_postfix({"written": written, "tok/s": f"{tokens / max(time.perf_counter() - started, 1e-9):.1f}"})
    bar.close()
    return kept, {"written": written, "kept": len(kept), "tokens": tokens, "filtered": dict(sorted(form.items())),
                  "dropped": dict(sorted(selector.dropped.items())), "seconds": round(time.perf_counter() - started, 3),
                  "cpu_seconds": round(time.process_time() - cpu_started, 3)}
