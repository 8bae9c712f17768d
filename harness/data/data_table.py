"""The data table of a chat target's training set (rule data_table: results/<run>/tables/data.csv and
data_filters.csv): what its drafters learn from, by source, from the summaries the rules that made it wrote.

``data.csv``: a row per source of the training split and a ``total`` row: questions and answer tokens (each answer
counted once: the unique answer tokens the drafters' budgets are passes over) and their shares, what each source
offered the selector and lost (a benchmark turn, a benchmark 8-gram, an exact or near duplicate; the synthesized
source's duplicates counted both among its own questions, rule synth_questions, and against the shared sets', rule
chat_prompts), the questions the target wrote that failed the form checks, and the overlap check: questions of any
split that share a word 8-gram with a benchmark prompt, recounted from the question files (0 passes).
``data_filters.csv``: the synthesized questions by the form check they failed, with the sampling that wrote them.
"""

from __future__ import annotations

from collections import Counter

SYNTH_SOURCE = "synth"
DATA_FIELDS = ["source", "synthesized", "questions", "question_share", "answer_tokens", "answer_token_share",
               "offered", "dropped_benchmark_turn", "dropped_benchmark_8gram", "duplicates_exact", "duplicates_near",
               "filtered_form", "questions_sharing_benchmark_8gram", "overlap_check"]
FILTER_FIELDS = ["reason", "questions", "share_of_written", "temperature", "top_p", "max_tokens"]
REASONS = {"benchmark_turn": "dropped_benchmark_turn", "benchmark_8gram": "dropped_benchmark_8gram",
           "duplicate_exact": "duplicates_exact", "duplicate_near": "duplicates_near"}


def share(part: float, whole: float) -> float:
    return round(part / whole, 4) if whole else 0.0


def source_drops(chat: dict, synth: dict | None, source: str) -> Counter:
    """What ``source`` lost to the selectors, by reason: rule chat_prompts' and, for the synthesized source, rule
    synth_questions' own."""
    dropped = Counter(chat["sources"].get(source, {}).get("dropped", {}))
    if source == SYNTH_SOURCE and synth:
        dropped.update(synth["dropped"])
    return dropped


def data_rows(chat: dict, synth: dict | None, regenerate: dict, train_sources: Counter, overlap: int) -> list[dict]:
    """``data.csv``'s rows: ``chat`` (chat-prompts' summary), ``synth`` (synth-questions', or None),
    ``regenerate`` (the training split's regenerate summary), the training questions by source and ``overlap``
    (questions of any split sharing a benchmark 8-gram)."""
    tokens = regenerate["answer_tokens_by_source"]
    questions, answers = sum(train_sources.values()), sum(tokens.values())
    rows = []
    for source in sorted(set(chat["sources"]) | set(train_sources)):
        dropped = source_drops(chat, synth, source)
        offered = chat["sources"].get(source, {}).get("offered", 0)
        if source == SYNTH_SOURCE and synth:
            offered = synth["written"] - sum(synth["filtered"].values())
        rows.append({"source": source, "synthesized": source == SYNTH_SOURCE, "questions": train_sources[source],
                     "question_share": share(train_sources[source], questions), "answer_tokens": tokens.get(source, 0),
                     "answer_token_share": share(tokens.get(source, 0), answers), "offered": offered,
                     **{column: dropped[reason] for reason, column in REASONS.items()},
                     "filtered_form": sum(synth["filtered"].values()) if source == SYNTH_SOURCE and synth else 0,
                     "questions_sharing_benchmark_8gram": "", "overlap_check": ""})
    total = {"source": "total", "synthesized": "", "questions": questions, "question_share": 1.0,
             "answer_tokens": answers, "answer_token_share": 1.0,
             **{column: sum(row[column] for row in rows) for column in ("offered", *REASONS.values(), "filtered_form")},
             "questions_sharing_benchmark_8gram": overlap, "overlap_check": "pass" if overlap == 0 else "FAIL"}
    return rows + [total]


def filter_rows(synth: dict) -> list[dict]:
    """``data_filters.csv``'s rows: the synthesized questions by the form check they failed, then those kept."""
    sampling = {key: synth["sampling"][key] for key in ("temperature", "top_p", "max_tokens")}
    counts = {**synth["filtered"], **{f"selector:{reason}": count for reason, count in synth["dropped"].items()},
              "kept": synth["kept"]}
    return [{"reason": reason, "questions": count, "share_of_written": share(count, synth["written"]), **sampling}
            for reason, count in counts.items()]
