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
    return [name for name in trained_drafters() if drafter_method(name) == method]


def trained_drafters():
    """Drafters the workflow trains; an entry with `path` names a ready-made one (an official EAGLE head)."""
    return [name for name in config["drafters"] if "path" not in config["drafters"][name]]


def drafter_dir(name):
    settings = drafter_settings(name)
    return settings["path"] if "path" in settings else work(f"drafters/{name}")


def drafter_data(wildcards):
    domain = drafter_settings(wildcards.drafter).get("domain")
    if domain:  # a domain drafter: features on the fly from that slice of the training split
        return work(f"data/tokens/domain-{domain}.pt")
    if drafter_settings(wildcards.drafter).get("data", "features") == "tokens":
        return work("data/tokens/train.pt")
    return work("features/target/index.json")


def drafter_arguments(wildcards, input):
    data = Path(input.data).parent if input.data.endswith("index.json") else input.data
    return shlex.join(plan.train_arguments(config, wildcards.drafter, input.target, str(data), input.heldout))


rule train_drafter:
    input:
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
    threads: config["threads"]
    resources:
        mem_mb=8000,
        runtime=lambda wildcards: int(drafter_settings(wildcards.drafter).get("time_budget_s", 3600) / 60) + 30,
        gpu=gpus_per_job(),
    shell:
        "python -m harness train {params.arguments} --checkpoint {params.checkpoint} --threads {threads}"
        " --no-progress --out {output.drafter} --metrics {output.metrics}"


# train_<method>: every configured drafter of a catalog method that trains one (needs: drafter)
for _method in catalog_methods():
    if plan.needs_drafter(_method):

        rule:
            name:
                f"train_{_method}"
            input:
                expand(work("drafters/{drafter}"), drafter=drafters_of(_method)),
