"""Inputs: prompt sets (Spec-Bench, MT-Bench, GSM8K, HumanEval, JSONL/text), the training corpus, token streams
and the code-completion prompts built from the corpus."""
