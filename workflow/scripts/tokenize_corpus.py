"""Rules tokenize and tokenize_domain: one split of the corpus (or the training documents of one domain, by path
pattern) as a flat token stream ([BOS] doc [EOS] ...)."""
from pathlib import Path

from transformers import AutoTokenizer

from harness.data.corpus import load_documents, select_documents
from harness.data.token_streams import save_tokens, tokenize_documents

tokenizer = AutoTokenizer.from_pretrained(snakemake.input.tokenizer)  # noqa: F821
documents = load_documents(Path(snakemake.input.documents))  # noqa: F821
patterns = snakemake.params.get("patterns")  # noqa: F821
if patterns:
    documents = select_documents(documents, list(patterns))
    if not documents:
        raise SystemExit(f"no training document matches {list(patterns)}")
tokens = tokenize_documents(tokenizer, documents)
save_tokens(Path(snakemake.output[0]), tokens)  # noqa: F821
print(f"{Path(snakemake.output[0]).stem}: {len(documents)} documents, {tokens.numel()} tokens")  # noqa: F821
