"""Rule tokenize: one split of the corpus as a flat token stream ([BOS] doc [EOS] ...)."""
from pathlib import Path

from transformers import AutoTokenizer

from harness.data.corpus import load_documents
from harness.data.token_streams import save_tokens, tokenize_documents

tokenizer = AutoTokenizer.from_pretrained(snakemake.input.tokenizer)  # noqa: F821
tokens = tokenize_documents(tokenizer, load_documents(Path(snakemake.input.documents)))  # noqa: F821
save_tokens(Path(snakemake.output[0]), tokens)  # noqa: F821
print(f"{snakemake.wildcards.split}: {tokens.numel()} tokens")  # noqa: F821
