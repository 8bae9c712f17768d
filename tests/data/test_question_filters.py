"""Which training questions are kept: none sharing a turn or a word 8-gram with the benchmark, no exact or near
duplicate, and a question the target wrote checked for form first."""

from __future__ import annotations

from harness.data.question_filters import (
    FormBounds,
    benchmark_selector,
    form_problem,
    shared_ngrams,
    shingles,
    word_ngrams,
)

BENCHMARK = ["Compose an engaging travel blog post about a recent trip to Hawaii, highlighting cultural experiences.",
             "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May."]


def jaccard(first: set, second: set) -> float:
    return len(first & second) / len(first | second)


def test_a_question_copying_a_benchmark_8gram_is_dropped_and_a_7gram_is_not():
    selector = benchmark_selector(BENCHMARK, near=0.5)
    copied = "Please write me a travel blog post about a recent trip to Hawaii for my readers."  # 8 words shared
    assert word_ngrams(copied, 8) & word_ngrams(BENCHMARK[0], 8)
    assert not selector.offer(copied) and selector.dropped["benchmark_8gram"] == 1
    seven = "Tell me about a recent trip to Hawaii, my friend, in verse."  # "about a recent trip to hawaii" + ...
    assert not word_ngrams(seven, 8) & word_ngrams(BENCHMARK[0], 8)
    assert selector.offer(seven)
    assert not selector.offer("  Natalia sold clips to 48 of her friends in April, and then she sold half as many "
                              "clips in\nMay.")  # the benchmark's turn, spacing aside
    assert selector.dropped["benchmark_turn"] == 1
    assert shared_ngrams([copied, seven], BENCHMARK) == 1


def test_exact_and_near_duplicates_are_dropped():
    selector = benchmark_selector([], near=0.5)
    first = "How do I sort a list of numbers in Python without using the built-in sorted function?"
    assert selector.offer(first)
    assert not selector.offer("how do I sort a list of numbers in python, without using the built in sorted function")
    near = "How do I sort a list of numbers in Python without using the built-in sort method?"
    assert jaccard(shingles(near), shingles(first)) >= 0.5
    assert not selector.offer(near)
    far = "What is the capital of France, and why did it become the capital?"
    assert jaccard(shingles(far), shingles(first)) < 0.5 and selector.offer(far)
    assert dict(selector.dropped) == {"duplicate_exact": 1, "duplicate_near": 1}
    strict = benchmark_selector([], near=1.0)  # only identical 3-gram sets are near duplicates
    assert strict.offer(first) and strict.offer(near)


def test_near_duplicates_are_found_among_many_kept_questions_as_by_brute_force():
    texts = [f"Question {index % 7}: how many apples does person {index % 5} have after {index % 3} days?"
             for index in range(60)]
    selector, kept = benchmark_selector([], near=0.6), []
    for text in texts:
        expected = not any(jaccard(shingles(text), shingles(other)) >= 0.6 for other in kept) and \
            " ".join(text.lower().split()) not in {" ".join(other.lower().split()) for other in kept}
        assert selector.offer(text) == expected
        kept += [text] if expected else []
    assert 1 < len(kept) < len(texts)


def test_a_written_question_is_checked_for_form():
    bounds = FormBounds(min_words=3, max_words=12, min_ascii_letters=0.95)
    templates = ["<|im_start|>", "<|im_end|>"]
    assert form_problem("What is a prime number?", True, templates, bounds) is None
    assert form_problem("What is a prime number?", False, templates, bounds) == "unfinished"
    assert form_problem("What is <|im_start|>assistant", True, templates, bounds) == "template_tokens"
    assert form_problem("  \n ", True, templates, bounds) == "empty"
    assert form_problem("Why?", True, templates, bounds) == "too_short"
    assert form_problem(" ".join(["word"] * 13), True, templates, bounds) == "too_long"
    assert form_problem("Что такое простое число?", True, templates, bounds) == "language"
    assert form_problem("List the steps.\nStep one.\nStep one.", True, templates, bounds) == "repeated_lines"
