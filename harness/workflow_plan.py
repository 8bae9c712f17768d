"""What the workflow runs, as pure functions of its config and the method catalog: variants, prompt sets, engine
passes, and the command lines of bench and drafter-training jobs (used by the Snakemake rules; torch-free)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.catalog import catalog, entry, method_names, options_type
from harness.errors import DraftcountError
from harness.options import parse_options
from harness.store.hub import is_hub_id
from harness.trees.beam_shape import SHAPE_FIELDS, beam_methods
from harness.trees.calibration_protocol import protocol_variants
from harness.trees.chain_shape import chain_field, chain_methods

WORKFLOW_ONLY_KEYS = ("method", "drafter", "ablation", "study", "verifier", "samples", "temperatures", "datasets",
                      "load")
DATASTORE_FILE = "datastore/train.pt"  # `datastore: auto`: the retrieval datastore over the zoo's training split
LATENCY_FILE = "tree/latency.json"  # `latency_file: auto`: the target's latency per verified tokens (dspark's planner)


DRAFT_LM = "draft"  # the draft LM as a drafter name: `init_from: draft` (PARD adapts it), sd's chain-length file
HUB_DIR = "hub"  # hub ids' files, linked into work_dir/hub/<owner>--<name> by rule fetch_hub


def local_source(source: str, work_dir: Path) -> str:
    """A model or drafter path as rules take it: itself, or for a hub id the directory rule fetch_hub makes of it
    (so a hub id is never a missing input file)."""
    return str(Path(work_dir) / HUB_DIR / source.replace("/", "--")) if is_hub_id(source) else source


def hub_sources(config: dict) -> dict[str, str]:
    """{local directory name: hub id} for every model and drafter the config gives as a hub id."""
    sources = [*config.get("models", {}).values(), *(settings.get("path", "") for settings in config["drafters"].values())]
    return {source.replace("/", "--"): source for source in sources if source and is_hub_id(str(source))}


def needs_draft_lm(method: str) -> bool:
    """The method runs a draft LM (``--draft``)."""
    return entry(method).needs_draft


def needs_drafter(method: str) -> bool:
    """The method runs a trained drafter directory (``--drafter``)."""
    return entry(method).needs_drafter


_VARIANT_TABLES: dict[int, tuple[tuple, dict, dict[str, dict[str, Any]]]] = {}


def variant_table(config: dict) -> dict[str, dict[str, Any]]:
    """``built_variant_table(config)``, built once per bench.methods (the plan asks for it at every variant of every
    job: 20,000 times a dry run of the default config): kept while the dict, its names, bench.fixed_shapes and the
    catalog stay the same (a drafter study adding a variant builds it again). Read-only for callers."""
    methods = config["bench"]["methods"]
    key = (tuple(methods), config["bench"].get("fixed_shapes"), tuple(method_names()))
    cached = _VARIANT_TABLES.get(id(methods))
    if cached is not None and cached[1] is methods and cached[0] == key:
        return cached[2]
    table = built_variant_table(config)
    _VARIANT_TABLES[id(methods)] = (key, methods, table)
    return table


def built_variant_table(config: dict) -> dict[str, dict[str, Any]]:
    """bench.methods, plus an implied variant named after every catalog method that no configured variant runs
    (its default options): what ``bench_<method>`` runs for a method the config leaves out, so a method listed in
    the catalog is benchmarked without touching the config. The default target runs only configured variants. Every
    main variant goes through the calibration protocol (``harness.trees.calibration_protocol``): its chain length or
    tree shape `auto`, one line if it fixes one."""
    variants = dict(config["bench"]["methods"])
    configured = {settings.get("method", name) for name, settings in variants.items()}
    for name in method_names():
        if name not in configured and name not in variants:
            variants[name] = {}
    unknown = sorted({settings.get("method", name) for name, settings in variants.items()} - set(catalog()))
    if unknown:
        raise ValueError(f"bench.methods runs method {unknown[0]!r}, which is not in the catalog "
                         f"(methods/__init__.py): {', '.join(catalog())}")
    return protocol_variants(variants, config["bench"].get("fixed_shapes"))


def with_implied_drafters(config: dict) -> dict:
    """``config`` with a `drafters` entry (the method's training defaults: ``{method: <it>}``) for every variant of a
    trained-drafter method that names no drafter and whose method has no entry of its name: a method added to the
    catalog trains and runs without a line of config. A variant naming a drafter that is not configured stays an
    error (``drafter_path``'s callers say so)."""
    implied = {}
    for variant, settings in variant_table(config).items():
        method = settings.get("method", variant)
        if entry(method).needs_drafter and "drafter" not in settings and method not in config["drafters"]:
            implied[method] = {"method": method}
    return {**config, "drafters": {**config["drafters"], **implied}} if implied else config


def implied_variants(config: dict) -> list[str]:
    """The variants ``variant_table`` adds for catalog methods that bench.methods leaves out."""
    return [name for name in variant_table(config) if name not in config["bench"]["methods"]]


def method_variants(config: dict, method: str, ablation: bool = False) -> list[str]:
    """What ``bench_<method>`` (``ablate_<method>``) runs: the method's configured main (ablation) variants to
    run, or its implied default variant when the config runs the method under no variant at all."""
    chosen = [name for name in variant_names(config)
              if variant_method(config, name) == method and is_ablation(config, name) == ablation]
    if not chosen and not ablation and method in implied_variants(config):
        return [method]
    return chosen


def variant_names(config: dict) -> list[str]:
    """The variants to run: every entry of bench.methods, or only those listed in bench.only."""
    names = list(config["bench"]["methods"])
    only = config["bench"].get("only")
    if only:
        unknown = [name for name in only if name not in names]
        if unknown:
            raise ValueError(f"bench.only names {unknown[0]!r}, which is not under bench.methods")
        names = [name for name in names if name in only]
    return names


def variant_settings(config: dict, variant: str) -> dict[str, Any]:
    return variant_table(config)[variant]


def variant_method(config: dict, variant: str) -> str:
    return variant_settings(config, variant).get("method", variant)


def variant_drafter(config: dict, variant: str) -> str:
    return variant_settings(config, variant).get("drafter", variant_method(config, variant))


def is_ablation(config: dict, variant: str) -> bool:
    return bool(variant_settings(config, variant).get("ablation", False))


def study_of(config: dict, variant: str) -> str | None:
    """The study a variant belongs to: its `study`, `ablations` for an ablation without one, None for a variant of
    the main comparison."""
    settings = variant_settings(config, variant)
    if settings.get("study"):
        return str(settings["study"])
    return "ablations" if settings.get("ablation") else None


def main_variants(config: dict) -> list[str]:
    """The main comparison (target `all`): the variants in no study."""
    return [variant for variant in variant_names(config) if study_of(config, variant) is None]


def load_variants(config: dict) -> list[str]:
    """The variants the load study decodes beside `ar`: bench.load_variants, or every main variant whose method
    decodes batches (but `ar`: the study runs it twice, the A/A control) and every variant marked ``load: true``
    (another size of a batched method, say); one line for a named or marked variant that is not one, or whose
    method decodes one request at a time."""
    bench = config["bench"]
    if "load_variants" not in bench:
        main = [variant for variant in main_variants(config)
                if entry(variant_method(config, variant)).batched and variant_method(config, variant) != "ar"]
        marked = [variant for variant in variant_names(config)
                  if variant_settings(config, variant).get("load") and variant not in main]
        check_batched(config, marked, "load: true")
        return main + marked
    check_batched(config, bench["load_variants"], "bench.load_variants")
    return list(bench["load_variants"])


def check_batched(config: dict, variants: list[str], where: str) -> None:
    """Each of ``variants`` (named at ``where``) is a variant whose method decodes batches, or one line."""
    for variant in variants:
        if variant not in variant_names(config):
            raise ValueError(f"{where}: {variant!r} is not a variant (bench.methods names "
                             f"{', '.join(variant_names(config))})")
        if not entry(variant_method(config, variant)).batched:
            raise ValueError(f"{where}: {variant}'s method {variant_method(config, variant)!r} decodes "
                             "one request at a time (batched methods: "
                             f"{', '.join(name for name, item in catalog().items() if item.batched)})")


def every_dataset_variants(config: dict) -> list[str]:
    """The variants run on every dataset (the others are ablations and budget sweeps, on bench.ablation_datasets):
    the report's and figures' main rows when they cover the studies too."""
    return [variant for variant in variant_names(config) if not is_ablation(config, variant)]


def study_variants(config: dict, study: str | None = None) -> list[str]:
    """The variants of one study (default: of every study): what `studies` (`study_<name>`) runs beyond `all`."""
    return [variant for variant in variant_names(config)
            if study_of(config, variant) is not None and (study is None or study_of(config, variant) == study)]


def study_names(config: dict) -> list[str]:
    return sorted({study for variant in variant_names(config) if (study := study_of(config, variant))})


def variant_temperatures(config: dict, variant: str) -> list[str]:
    """The temperatures a variant runs at: its own `temperatures` (those of bench.temperatures it names), or all."""
    chosen = variant_settings(config, variant).get("temperatures")
    names = temperature_names(config)
    if chosen is None:
        return names
    own = [f"{float(t):g}" for t in chosen]
    missing = [t for t in own if t not in names]
    if missing:
        raise ValueError(f"variant {variant!r} runs at temperature {missing[0]}, which bench.temperatures lacks")
    return own


def variant_datasets(config: dict, variant: str) -> list[str]:
    own = variant_settings(config, variant).get("datasets")
    if own:
        return list(own)
    bench = config["bench"]
    return bench.get("ablation_datasets", bench["datasets"]) if is_ablation(config, variant) else bench["datasets"]


def temperature_names(config: dict) -> list[str]:
    return [f"{t:g}" for t in config["bench"]["temperatures"]]


def variant_options(config: dict, variant: str, temperature: str, work_dir: Path) -> dict[str, Any]:
    """The method options of a variant, with the files the workflow builds for it in place of `auto`:
    `tree_file: auto` is the Sequoia tree searched for the temperature with the variant's `tree_budget` (auto:
    the latency-chosen budget) for tree_sd, the data-driven static tree of `tree_nodes` nodes for stand;
    `datastore: auto` the retrieval datastore over the training split; `head: auto` the trained drafter named by
    the variant's `drafter` (default eagle); `latency_file: auto` the target's measured latency per verified
    tokens (rule measure_latency)."""
    settings = variant_settings(config, variant)
    options = {key: value for key, value in settings.items() if key not in WORKFLOW_ONLY_KEYS}
    budget = options.pop("tree_budget", "auto")
    nodes = options.pop("tree_nodes", 24)
    if options.get("tree_file") == "auto":
        name = (f"stand-t{temperature}-n{nodes}" if variant_method(config, variant) == "stand"
                else f"sequoia-t{temperature}-b{budget}")
        options["tree_file"] = str(Path(work_dir) / "tree" / f"{name}.json")
    if options.get("budget") == "auto":  # a beam drafter: the depth and budget measured best on this machine
        check_beam_method(config, variant)
        for name in SHAPE_FIELDS:
            options.pop(name, None)
        options["shape_file"] = str(shape_file(config, variant, temperature, work_dir))
    length = chain_length_field(config, variant)
    if length and options.get(length) == "auto":  # a chain drafter: the length measured best on this machine
        del options[length]
        options["length_file"] = str(length_file(config, variant, temperature, work_dir))
    if options.get("datastore") == "auto":
        options["datastore"] = str(Path(work_dir) / DATASTORE_FILE)
    if options.get("latency_file") == "auto":
        options["latency_file"] = str(Path(work_dir) / LATENCY_FILE)
    if options.get("head") == "auto":
        options["head"] = drafter_path(config, settings.get("drafter", "eagle"), work_dir)
    if "experts" in options:  # hedgespec: an expert's drafter=NAME is a configured drafter (auto: the variant's)
        options["experts"] = [resolve_expert(config, str(spec), settings.get("drafter", "eagle"), work_dir)
                              for spec in options["experts"]]
    return options


def check_beam_method(config: dict, variant: str) -> None:
    method = variant_method(config, variant)
    if method not in beam_methods():
        raise ValueError(f"bench.methods.{variant}: budget: auto measures a beam drafter's tree shape; method "
                         f"{method!r} does not grow beam trees")


def check_variant_options(config: dict, work_dir: Path) -> None:
    """Every variant's options parse as its method's options (names and values, through the torch-free options
    classes of the catalog), so a bad one stops the plan (`snakemake -n`), not a job hours into a cluster run.
    File-valued options are only named here: the jobs read them (some are built by the workflow)."""
    for variant in variant_names(config):
        method = variant_method(config, variant)
        options = variant_options(config, variant, temperature_names(config)[0], work_dir)
        try:
            parse_options(options_type(method), options, f"method '{method}'")
        except DraftcountError as error:
            raise ValueError(f"bench.methods.{variant}: {error}") from None


def shape_file(config: dict, variant: str, temperature: str, work_dir: Path) -> Path:
    """Where rule tree_shape writes a `budget: auto` variant's measured tree shape: one per method, drafter and
    temperature (a traversal variant shares its token-level twin's trees)."""
    method, drafter = variant_method(config, variant), variant_drafter(config, variant)
    return Path(work_dir) / "tree" / f"shape-{method}-{drafter}-t{temperature}.json"


def chain_length_field(config: dict, variant: str) -> str | None:
    """The option that is a variant's chain length when its method has one (sd: gamma, pard: k, dflash:
    verify_length), else None."""
    method = variant_method(config, variant)
    return chain_field(method) if method in chain_methods() else None


def length_file(config: dict, variant: str, temperature: str, work_dir: Path) -> Path:
    """Where rule chain_length writes a `gamma: auto` / `k: auto` variant's measured chain length: one per method,
    drafter (sd's: its draft LM, `draft`) and temperature."""
    return Path(work_dir) / "tree" / f"length-{variant_method(config, variant)}-{chain_drafter(config, variant)}" \
        f"-t{temperature}.json"


def chain_drafter(config: dict, variant: str) -> str:
    """A chain variant's drafter as rule chain_length names it: its trained drafter, or `draft` (sd's draft LM)."""
    return variant_drafter(config, variant) if needs_drafter(variant_method(config, variant)) else DRAFT_LM


def length_variant(config: dict, method: str, drafter: str) -> str:
    """The first variant of ``method`` with ``drafter`` whose chain length is `auto`: the options it is measured
    with."""
    return auto_variant(config, method, drafter, chain_field(method), chain_drafter)


def shape_variant(config: dict, method: str, drafter: str) -> str:
    """The first `budget: auto` variant of ``method`` with ``drafter``: the options its shape is measured with."""
    return auto_variant(config, method, drafter, "budget", variant_drafter)


def auto_variant(config: dict, method: str, drafter: str, field: str,
                 drafter_of: Callable[[dict, str], str]) -> str:
    """The first variant of ``method`` whose drafter (as ``drafter_of`` names it) is ``drafter`` and whose option
    ``field`` is `auto`: the variant a calibration rule measures with."""
    for variant in variant_names(config):
        if (variant_method(config, variant) == method and drafter_of(config, variant) == drafter
                and variant_settings(config, variant).get(field) == "auto"):
            return variant
    raise ValueError(f"no variant of {method} with drafter {drafter} has {field}: auto")


def drafter_path(config: dict, drafter: str, work_dir: Path) -> str:
    """Where a configured drafter lives: its `path` (a hub id's fetched directory), or where the workflow trains it."""
    path = config["drafters"].get(drafter, {}).get("path")
    return local_source(str(path), work_dir) if path else str(Path(work_dir) / "drafters" / drafter)


def resolve_expert(config: dict, spec: str, default_drafter: str, work_dir: Path) -> str:
    """A hedgespec expert spec with `drafter=NAME` (a configured drafter, or auto) replaced by its directory."""
    method, *pairs = spec.split(":")
    resolved = []
    for pair in pairs:
        key, _, value = pair.partition("=")
        if key == "drafter" and (value == "auto" or value in config["drafters"]):
            pair = f"drafter={drafter_path(config, default_drafter if value == 'auto' else value, work_dir)}"
        resolved.append(pair)
    return ":".join([method, *resolved])


def built_inputs(config: dict, variant: str, temperature: str, work_dir: Path) -> dict[str, Any]:
    """The files a variant's options name that the workflow builds (its tree, datastore, head): bench inputs."""
    options = variant_options(config, variant, temperature, work_dir)
    auto = {key for key, value in variant_settings(config, variant).items() if value == "auto"}
    built: dict[str, Any] = {key: str(options[key]) for key in ("datastore", "head", "latency_file") if key in auto}
    drafters = [pair.partition("=")[2] for spec in options.get("experts", []) for pair in spec.split(":")[1:]
                if pair.startswith("drafter=")]
    if drafters:
        built["expert_drafters"] = drafters
    if "shape_file" in options and "budget" in auto:
        built["shape_file"] = str(options["shape_file"])
    if "length_file" in options and auto & {chain_length_field(config, variant)}:
        built["length_file"] = str(options["length_file"])
    if options.get("tree_file"):  # a user's tree file is an input too: a missing one fails at plan time
        built["tree_file"] = str(options["tree_file"])
    return built


def with_engine_pass(config: dict, engine_pass: str | None) -> dict:
    """``config`` with engine pass ``engine_pass``'s switches (bench.passes) over bench.engine; itself for None."""
    if engine_pass is None:
        return config
    passes = config["bench"].get("passes", {})
    if engine_pass not in passes:
        raise ValueError(f"engine pass {engine_pass!r} is not under bench.passes ({', '.join(passes) or 'none'})")
    bench = {**config["bench"], "engine": {**config["bench"].get("engine", {}), **passes[engine_pass]}}
    return {**config, "bench": bench}


DUMP_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def feature_dump_bytes(features: dict, hidden: int) -> int:
    """Bytes a feature dump (rule dump_features) writes: every window's token ids (int32) and its hidden states of
    every configured layer (``harness.training.features.dump_size_bytes`` says the same at dump time)."""
    layers = len(features.get("layers", ["last"]))
    element = DUMP_BYTES[features.get("dtype", "bfloat16")]
    return int(features["sequences"]) * int(features["seq_len"]) * (hidden * layers * element + 4)


def traversal_variants(config: dict) -> list[str]:
    """The variants verified by traversal on every dataset (the checks measure their trees under every verifier)."""
    return [variant for variant in every_dataset_variants(config)
            if variant_settings(config, variant).get("verifier") == "traversal"]
