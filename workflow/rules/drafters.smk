# Trained drafters (EAGLE heads, Lyanna drafters): one directory per entry of `drafters`,
# trained by `python -m harness train` on the target's feature dump or on features
# computed on the fly. Resumable: a killed run continues from its checkpoint.


def drafter_settings(name):
    if name not in config["drafters"]:
        raise ValueError(f"drafter {name!r} is not configured under `drafters`")
    return config["drafters"][name]


def drafter_method(name):
    return drafter_settings(name).get("method", name)


def drafters_of(method):
    """A method's configured drafters, not those the drafter studies add (drafter_studies.smk)."""
    return [name for name in trained_drafters() if drafter_method(name) == method and name not in STUDY_DRAFTERS]


def trained_drafters():
    """Drafters the workflow trains; an entry with `path` names a ready-made one (an official EAGLE head)."""
    return [name for name in config["drafters"] if "path" not in config["drafters"][name]]


def drafter_dir(name):
    drafter_settings(name)  # a drafter the config does not name is an error
    return plan.drafter_path(config, name, WORK)


def drafter_data(wildcards):
    domain = drafter_settings(wildcards.drafter).get("domain")
    if domain:  # a domain drafter: features on the fly from that slice of the training split
        return work(f"data/tokens/domain-{domain}.pt")
    data = drafter_settings(wildcards.drafter).get("data", "features")
    if data == "tokens":
        return train_tokens()
    if data == "regenerate":  # the target's own continuations, features on the fly
        return work("data/tokens/regenerated.pt")
    return work("features/target/index.json")


def drafter_inputs(wildcards):
    """The drafter a fine-tuning entry (`init_from`, e.g. GTO) starts from: trained first, then an input; `draft`:
    the draft LM (PARD adapts it)."""
    source = drafter_settings(wildcards.drafter).get("init_from")
    if source == jobs.DRAFT_LM:
        return {"init": draft_model()}
    return {"init": drafter_dir(source)} if source else {}


def drafter_arguments(wildcards, input):
    data = Path(input.data).parent if input.data.endswith("index.json") else input.data
    return shlex.join(jobs.train_arguments(config, wildcards.drafter, input.target, str(data), input.heldout, WORK))


def train_minutes(name):
    return training_minutes(drafter_settings(name))


def train_runtime(wildcards):
    """A training job's time limit: twice its `expected_minutes` plus 30, at most the cluster's cap
    (bench.max_runtime_minutes, default 24 h). A longer training runs over several jobs: training checkpoints every
    minute, and a job the cap kills is resubmitted (``retries``) and resumes at the step it reached."""
    return min(train_minutes(wildcards.drafter), config["bench"].get("max_runtime_minutes", 1440))


def train_retries():
    cap = config["bench"].get("max_runtime_minutes", 1440)
    longest = max([train_minutes(name) for name in trained_drafters()], default=0)
    return -(-longest // cap)  # one retry per cap-long slice after the first, and one for a node failure


def announce_feature_dump():
    """The feature dump's size on disk, said at plan time (before anything is written) when the target's width is
    known; drafters with `data: tokens` compute the same features on the fly instead and need no dump."""
    source = Path(target_model()) / "config.json"
    users = [name for name in trained_drafters() if drafter_settings(name).get("data", "features") == "features"]
    if not users or not source.is_file():
        return
    text = json.loads(source.read_text())
    hidden = int((text.get("text_config") or text)["hidden_size"])
    size = plan.feature_dump_bytes(config["features"], hidden)
    shown = f"{size / 2**30:.1f} GiB" if size >= 2**30 else f"{size / 2**20:.0f} MiB"
    print(f"feature dump for {', '.join(users)}: {shown} under {work('features/target')} "
          "(drafters.<name>.data: tokens computes the features on the fly instead)", file=sys.stderr)


announce_feature_dump()


# The target's own continuations of training-split prompts (config `regenerate`): what drafters with
# `data: regenerate` (and the draft LM with draft.data: regenerate) train on; generated once, then cached. An
# imported chat target answers chat questions instead (rule regenerate_chat, rules/real.smk).
if not imported_target():

    rule regenerate:
        input:
            target=target_model(),
            tokens=work("data/tokens/train.pt"),
        output:
            work("data/tokens/regenerated.pt"),
        params:
            arguments=lambda wildcards: shlex.join(jobs.regenerate_arguments(config.get("regenerate", {}))),
            device=compute_device(),
        threads: config["threads"]
        resources:
            mem_mb=4000,
            runtime=30,
            gpu=gpus_per_job(),
        shell:
            "python -m harness regenerate --target {input.target} --tokens {input.tokens} --out {output}"
            " {params.arguments} --device {params.device} --threads {threads} --no-progress"


rule train_drafter:
    input:
        unpack(drafter_inputs),
        target=target_model(),
        data=drafter_data,
        heldout=work("data/tokens/heldout.pt"),
    output:
        drafter=directory(work("drafters/{drafter}")),
        metrics=work("metrics/drafter-{drafter}.json"),
    params:
        arguments=drafter_arguments,
        checkpoint=work("checkpoints/drafter-{drafter}.pt"),
    wildcard_constraints:
        drafter="|".join(trained_drafters()) or "^$",
    priority: 20  # training before benchmarking: the drafters are the long jobs
    threads: config["threads"]
    resources:
        mem_mb=8000,
        runtime=train_runtime,
        gpu=gpus_per_job(),
    retries: train_retries()
    shell:
        "python -m harness train {params.arguments} --checkpoint {params.checkpoint} --threads {threads}"
        " --out {output.drafter} --metrics {output.metrics}"


# train_<method>: every configured drafter of a catalog method that trains one (needs: drafter)
for _method in catalog_methods():
    if plan.needs_drafter(_method):

        rule:
            name:
                f"train_{_method}"
            input:
                expand(work("drafters/{drafter}"), drafter=drafters_of(_method)),
