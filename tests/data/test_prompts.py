"""Prompt loaders on the offline copies in ../shared/data, HumanEval, text files; chat templates."""

import pytest

from harness.errors import DraftcountError
import copy

from harness.data.prompts import Prompt, encode_turn, load_prompts, longest_sequence
from harness.analysis.specbench import MT_BENCH_CATEGORIES
from harness.data.templates import PromptFormat, VICUNA_SYSTEM, llama2_text, plain_text, vicuna_text


def test_spec_bench(shared_data):
    prompts = load_prompts(str(shared_data / "spec_bench" / "question.jsonl"))
    assert len(prompts) == 480
    assert len({prompt.category for prompt in prompts}) == 13
    assert len(prompts[0].turns) == 2


def test_mt_bench_directory_category_and_limit(shared_data):
    prompts = load_prompts(str(shared_data / "mt_bench"), category="coding,math")
    assert len(prompts) == 20 and {prompt.category for prompt in prompts} == {"coding", "math"}
    assert len(load_prompts(str(shared_data / "mt_bench"), limit=5)) == 5


def test_gsm8k(shared_data):
    prompts = load_prompts(str(shared_data / "gsm8k" / "test.jsonl"), limit=3)
    assert len(prompts) == 3 and prompts[0].turns[0].startswith("Janet")
    assert len(load_prompts(str(shared_data / "gsm8k" / "test.jsonl"))) == 1319


def test_humaneval():
    prompts = load_prompts("humaneval")
    assert len(prompts) == 164 and prompts[0].id == "HumanEval/0" and "def " in prompts[0].turns[0]


def test_text_file(tmp_path):
    path = tmp_path / "mine.txt"
    path.write_text("first prompt\n\nsecond\\nline\n")
    prompts = load_prompts(str(path))
    assert [prompt.turns[0] for prompt in prompts] == ["first prompt", "second\nline"]


@pytest.mark.parametrize("spec,message", [
    ("nonexistent.jsonl", "neither a known name"),
    ("BAD_CATEGORY", "category 'nope' not in"),
    ("EMPTY_LAYOUT", "unknown record layout"),
])
def test_bad_prompt_sets(tmp_path, shared_data, spec, message):
    if spec == "BAD_CATEGORY":
        with pytest.raises(DraftcountError, match=message):
            load_prompts(str(shared_data / "mt_bench"), category="nope")
        return
    if spec == "EMPTY_LAYOUT":
        spec = str(tmp_path / "odd.jsonl")
        (tmp_path / "odd.jsonl").write_text('{"text": "x"}\n')
    with pytest.raises(DraftcountError, match=message):
        load_prompts(spec)


def test_encode_turn_with_and_without_chat_template(tokenizer):
    plain = encode_turn(tokenizer, [("q1", "a1")], "q2")
    assert tokenizer.decode(plain) == "q1\n\na1\n\nq2"
    templated = tokenizer.__class__(tokenizer_object=tokenizer.backend_tokenizer, eos_token="<eos>")
    templated.chat_template = "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"
    ids = encode_turn(templated, [("q1", "a1")], "q2")
    assert templated.decode(ids) == "[user]q1[assistant]a1[user]q2[assistant]"


def test_longest_sequence_bounds_every_turn_of_a_run(tokenizer):
    """The positions a run reserves before its warm-up cover every turn, earlier answers at max_new_tokens."""
    prompts = [Prompt(id="a", category="c", turns=("a short question",)),
               Prompt(id="b", category="c", turns=("first question here", "and a second, longer question?"))]
    max_new = 12
    bound = longest_sequence(tokenizer, prompts, max_new)
    vocabulary = [token for token in tokenizer.get_vocab() if token.isalpha()][:50]
    for words in range(1, 40):  # an answer that decodes to text re-encoding to about max_new tokens or more
        answer = tokenizer.decode(tokenizer(" ".join(vocabulary[:words]), add_special_tokens=False)["input_ids"][:max_new])
        history = [(prompts[1].turns[0], answer)]
        assert len(encode_turn(tokenizer, history, prompts[1].turns[1])) + max_new + 1 <= bound
    assert bound >= len(encode_turn(tokenizer, [], prompts[0].turns[0])) + max_new + 1


def test_domain_prompts_cut_from_each_domain(tmp_path):
    import json

    from harness.data.code_prompts import write_code_prompts
    from harness.data.corpus import Document, write_documents

    body = "\n".join(f"x{i} = {i}" for i in range(12)) + "\n" + "\n".join(
        f"def f{i}(a):\n    return a + {i}" for i in range(6)) + "\n"
    write_documents(tmp_path / "heldout.jsonl", [Document("email/a.py", body), Document("idlelib/b.py", body),
                                                  Document("os.py", body)])
    count = write_code_prompts(tmp_path / "heldout.jsonl", tmp_path / "out.jsonl", 3, 6, 0,
                               domains={"net": ["email/*"], "gui": ["idlelib/*"]})
    prompts = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert count == 6 and [p["category"] for p in prompts] == ["net"] * 3 + ["gui"] * 3
    assert all(p["id"].startswith("email/") for p in prompts[:3])
    with pytest.raises(DraftcountError, match="only"):
        write_code_prompts(tmp_path / "heldout.jsonl", tmp_path / "out.jsonl", 3, 6, 0, domains={"x": ["nope/*"]})


def test_edit_prompts_are_successive_edits_of_one_cut_in_order(tmp_path):
    from harness.data.corpus import Document, write_documents
    from harness.data.edit_prompts import write_edit_prompts

    body = "\n".join(f"x{i} = {i}" for i in range(12)) + "\n" + "\n".join(
        f"def f{i}(a):\n    return a + {i}" for i in range(6)) + "\n"
    write_documents(tmp_path / "heldout.jsonl", [Document(f"m{k}.py", body) for k in range(3)])
    assert write_edit_prompts(tmp_path / "heldout.jsonl", tmp_path / "edits.jsonl", 2, 4, 8, 0) == 8
    prompts = load_prompts(str(tmp_path / "edits.jsonl"))
    assert {prompt.category for prompt in prompts} == {"edits"}
    for module in (prompts[:4], prompts[4:]):
        assert [prompt.id.rsplit("#", 1)[1] for prompt in module] == ["v0", "v1", "v2", "v3"]
        lines = [prompt.turns[0].splitlines() for prompt in module]
        assert [len(rows) for rows in lines] == [8, 7, 6, 5] and len({rows[-1] for rows in lines}) == 1  # the header
        assert all(set(later) < set(earlier) for earlier, later in zip(lines, lines[1:]))  # one more line deleted
    with pytest.raises(DraftcountError, match="edited modules"):
        write_edit_prompts(tmp_path / "heldout.jsonl", tmp_path / "edits.jsonl", 4, 4, 8, 0)
    with pytest.raises(DraftcountError, match="too few"):
        write_edit_prompts(tmp_path / "heldout.jsonl", tmp_path / "edits.jsonl", 1, 9, 8, 0)


def test_stratified_limit_spreads_over_every_category(shared_data):
    """Spec-Bench's first 80 lines are MT-Bench; a stratified limit of 80 covers all 13 categories evenly, in file
    order, and the plan (torch-free) predicts the same selection."""
    from collections import Counter
    from pathlib import Path

    from harness import workflow_datasets as datasets

    path = str(shared_data / "spec_bench" / "question.jsonl")
    assert {prompt.category for prompt in load_prompts(path, limit=80)} <= set(MT_BENCH_CATEGORIES)
    chosen = load_prompts(path, limit=80, stratify=True)
    counts = Counter(prompt.category for prompt in chosen)
    assert len(counts) == 13 and set(counts.values()) == {6, 7} and sum(counts.values()) == 80
    everything = load_prompts(path)
    assert [everything.index(prompt) for prompt in chosen] == sorted(everything.index(prompt) for prompt in chosen)
    config = {"bench": {"dataset_paths": {"spec_bench": path}, "limit": 80, "stratify": True}, "prompts": {}}
    turns, planned = datasets.dataset_selection(config, "spec_bench", Path("work"))
    assert planned == dict(counts) and turns == sum(len(prompt.turns) for prompt in chosen)
    assert len(load_prompts(path, limit=5, stratify=True)) == 5  # fewer than the categories: the first 5 of them



def test_fastchat_templates_and_system_prompts(tokenizer):
    history = [("Hi", "Hello")]
    assert vicuna_text(history, "How?", "") == f"{VICUNA_SYSTEM} USER: Hi ASSISTANT: Hello</s>USER: How? ASSISTANT:"
    vicuna = encode_turn(tokenizer, history, "How?", PromptFormat("vicuna"))
    assert vicuna == tokenizer(vicuna_text(history, "How?", ""))["input_ids"]  # with the tokenizer's BOS
    assert vicuna_text([], "Q", "Be brief.") == "Be brief. USER: Q ASSISTANT:"
    assert llama2_text(history, "How?", "S") == "[INST] <<SYS>>\nS\n<</SYS>>\n\nHi [/INST] Hello </s><s>[INST] How? [/INST]"
    assert llama2_text([], "Q", "") == "[INST] Q [/INST]"
    assert plain_text(history, "How?", "S") == "S\n\nHi\n\nHello\n\nHow?"
    templated = copy.deepcopy(tokenizer)
    templated.chat_template = ("{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
                               "{% if add_generation_prompt %}[assistant]{% endif %}")
    with_system = tokenizer.decode(encode_turn(templated, [], "Q", PromptFormat("auto", "Be brief.")))
    assert with_system.replace(" ", "").startswith("[system]Bebrief.[user]Q")
    assert encode_turn(templated, [], "Q", PromptFormat("plain")) == tokenizer("Q")["input_ids"]
    with pytest.raises(DraftcountError, match="has none"):
        encode_turn(tokenizer, [], "Q", PromptFormat("model"))
    with pytest.raises(DraftcountError, match="must be one of"):
        PromptFormat("chatml")
