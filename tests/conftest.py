import os
from pathlib import Path

import pytest
import torch

from harness import wrap_model
from tests.helpers import build_tokenizer, make_llama, markov_llama, perturbed_copy, save_model_dir

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

if os.environ.get("PYTEST_XDIST_WORKER"):  # `pytest -n N`: one torch thread per worker, no oversubscription
    torch.set_num_threads(1)
    # and in every process a test starts (the CLI, Snakemake's jobs, a fresh interpreter): a second OpenMP thread
    # spins while the other worker computes, which cost `tests/test_cli.py`'s sd run 20-25% more CPU time for
    # nothing; a job that asks for threads (`--threads N`) still sets its own
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")


@pytest.fixture(autouse=True)
def one_torch_thread_per_worker():
    """Under `pytest -n N`, every test starts on one torch thread: a command a test runs in-process with `--threads 2`
    (`regenerate --workers 2 --threads 2`) set the worker's torch to 2 threads for every test after it, and with
    two workers on 2 cores each such test ran 3-4 times slower (a sampling check 25 s instead of 6)."""
    if os.environ.get("PYTEST_XDIST_WORKER") and torch.get_num_threads() != 1:
        torch.set_num_threads(1)
    yield


def pytest_configure(config: pytest.Config) -> None:
    """`pytest -n N` hands out tests with work stealing (``--dist worksteal``), unless told otherwise: an idle
    worker takes tests from a busy one, so no worker waits at the end while the other finishes a long file (with
    whole files per worker, ``--dist loadfile``, the suite ran 14 min 49 s against 13 min 24 s on 2 cores; a
    module's fixtures may now be built once on each worker). Set here rather than in addopts, so that a machine
    without pytest-xdist (the GPU box's `pytest -m cuda`) runs plain ``pytest``."""
    given = any(argument.startswith("--dist") for argument in config.invocation_params.args)
    if getattr(config.option, "dist", "no") == "load" and not given:
        config.option.dist = "worksteal"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files holding `slow` tests first, the last collected (the workflow's pipeline runs) first of all: with `-n N`
    the end-to-end pipeline starts at once on one worker while the others take the rest, instead of starting
    last. Within a file the order stays."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    first = {path: index for index, path in enumerate(dict.fromkeys(item.path for item in items))}
    order = {id(item): index for index, item in enumerate(items)}
    items.sort(key=lambda item: (item.path not in slow, -first[item.path] if item.path in slow else 0,
                                 order[id(item)]))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is not present")
    return SHARED_DATA


@pytest.fixture(scope="session")
def random_pair():
    """A random target and a perturbed copy of it as draft (same architecture, high agreement)."""
    target = make_llama(vocab=64, hidden=32, layers=2, heads=4, seed=0, init_range=0.3)
    return wrap_model(target), wrap_model(perturbed_copy(target, noise=0.15, seed=1))


@pytest.fixture(scope="session")
def trained_pair():
    """A briefly trained target (2 layers, width 48) and draft (1 layer, width 24): different depth and width."""
    target = markov_llama(layers=2)
    draft = markov_llama(hidden=24, layers=1, heads=2, seed=3)
    return wrap_model(target), wrap_model(draft)


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory, tokenizer):
    """Saved HF directories: target, draft (same tokenizer) and a draft with another tokenizer."""
    root = tmp_path_factory.mktemp("models")
    vocab = len(tokenizer)
    target = make_llama(vocab=vocab, hidden=32, layers=2, heads=4, seed=10, init_range=0.3, context=1024)
    draft = perturbed_copy(target, noise=0.2, seed=11)
    other_tokenizer = build_tokenizer(vocab_size=280)
    other = make_llama(vocab=len(other_tokenizer), hidden=16, layers=1, heads=2, seed=12)
    return {
        "target": save_model_dir(root / "target", target, tokenizer),
        "draft": save_model_dir(root / "draft", draft, tokenizer),
        "other_draft": save_model_dir(root / "other", other, other_tokenizer),
    }
