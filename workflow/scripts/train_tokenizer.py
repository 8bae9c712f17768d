"""Rule tokenizer: byte-level BPE on the training split, saved for AutoTokenizer."""
from pathlib import Path

from harness.data.corpus import load_documents
from harness.training.zoo import train_tokenizer

settings = snakemake.params.tokenizer  # noqa: F821
tokenizer = train_tokenizer(
    load_documents(Path(snakemake.input.train)),  # noqa: F821
    vocab_size=settings.get("vocab_size", 4096),
    out_dir=Path(snakemake.output[0]),  # noqa: F821
    max_bytes=settings.get("max_train_bytes", 8_000_000),
)
print(f"tokenizer: {len(tokenizer)} tokens, bos={tokenizer.bos_token_id}, eos={tokenizer.eos_token_id}")
