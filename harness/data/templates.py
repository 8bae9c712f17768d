"""How a conversation becomes the prompt text a target sees, as the field builds it.

``auto`` uses the model's own chat template when its tokenizer has one (Llama-3-Instruct, Qwen2), and plain text
otherwise (the zoo's models). Models without a chat template that published numbers were measured with get
FastChat's conversation templates, as Spec-Bench and EAGLE's evaluation scripts build them:

- ``vicuna`` (FastChat ``vicuna_v1.1``): ``{system} USER: {q1} ASSISTANT: {a1}</s>USER: {q2} ASSISTANT:``
- ``llama-2`` (FastChat ``llama-2``): ``[INST] <<SYS>>\\n{system}\\n<</SYS>>\\n\\n{q1} [/INST] {a1} </s><s>[INST] {q2} [/INST]``

A system prompt, when given, goes in the template's system slot (``{"role": "system"}`` for a chat template).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import DraftcountError

TEMPLATES = ("auto", "model", "plain", "vicuna", "llama-2")
VICUNA_SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. "
                 "The assistant gives helpful, detailed, and polite answers to the user's questions.")


@dataclass(frozen=True)
class PromptFormat:
    """template: one of TEMPLATES; system_prompt: '' for the template's default (none, or Vicuna's own)."""

    template: str = "auto"
    system_prompt: str = ""

    def __post_init__(self) -> None:
        if self.template not in TEMPLATES:
            raise DraftcountError(f"chat template must be one of {', '.join(TEMPLATES)}, not {self.template!r}")


def chat_messages(history: list[tuple[str, str]], question: str, system_prompt: str) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    for asked, answered in history:
        messages += [{"role": "user", "content": asked}, {"role": "assistant", "content": answered}]
    return messages + [{"role": "user", "content": question}]


def vicuna_text(history: list[tuple[str, str]], question: str, system_prompt: str) -> str:
    """FastChat's ``vicuna_v1.1`` (separators ' ' after a user turn and '</s>' after an assistant turn)."""
    text = (system_prompt or VICUNA_SYSTEM) + " "
    for asked, answered in history:
        text += f"USER: {asked} ASSISTANT: {answered}</s>"
    return text + f"USER: {question} ASSISTANT:"


def llama2_text(history: list[tuple[str, str]], question: str, system_prompt: str) -> str:
    """FastChat's ``llama-2`` template (the BOS of the first turn comes from the tokenizer)."""
    text = f"[INST] <<SYS>>\n{system_prompt}\n<</SYS>>\n\n" if system_prompt else "[INST] "
    turns = [*history, (question, None)]
    for index, (asked, answered) in enumerate(turns):
        text += asked + " " if index == 0 else f"[INST] {asked} "
        text += "[/INST]" if answered is None else f"[/INST] {answered} </s><s>"
    return text


def plain_text(history: list[tuple[str, str]], question: str, system_prompt: str) -> str:
    """Earlier turns and answers joined by blank lines, then the question (the zoo's models have no template)."""
    prefix = f"{system_prompt}\n\n" if system_prompt else ""
    return prefix + "".join(f"{asked}\n\n{answered}\n\n" for asked, answered in history) + question


def resolved_template(fmt: PromptFormat, has_chat_template: bool) -> str:
    if fmt.template == "auto":
        return "model" if has_chat_template else "plain"
    if fmt.template == "model" and not has_chat_template:
        raise DraftcountError("chat template 'model' asked for, but the target's tokenizer has none "
                              "(use vicuna, llama-2 or plain)")
    return fmt.template


FASTCHAT = {"vicuna": vicuna_text, "llama-2": llama2_text, "plain": plain_text}
