# The `vlm` study (issue 49; `--configfile workflow/config/default.yaml workflow/config/vlm.yaml`, target
# `study_vlm`): a LLaVA-style target trained on bar charts, a text-only draft LM, image-conditioned features, the
# drafters that read them (eagle keeping the image positions, HiViS dropping them, DREAM compressing them), every
# variant paired with ar on a bar-chart prompt set, and the study's table (harness/analysis/vlm.py).
from harness.catalog import entry as catalog_entry

if "vlm" in config:
    VLM = config["vlm"]


    def vlm_work(path):
        return str(WORK / "vlm" / path)


    def vlm_results(path):
        return str(RESULTS / "vlm" / path)


    def vlm_records():
        return [vlm_work(f"runs/{variant}-t{temperature:g}.jsonl") for variant in VLM["variants"]
                for temperature in VLM["temperatures"]]


    rule vlm_model:
        input:
            tokenizer=work("models/tokenizer"),
        output:
            directory(vlm_work("models/{role}")),
        params:
            settings=lambda wildcards: VLM[wildcards.role],
            shape=lambda wildcards: shlex.quote(json.dumps(VLM[wildcards.role].get("shape", {}))),
            gate=lambda wildcards: VLM[wildcards.role].get("min_image_accuracy", 0.0),
        wildcard_constraints:
            role="target|draft",
        threads: config["threads"]
        resources:
            mem_mb=4000,
            runtime=60,
        shell:
            "python -m harness vlm-{wildcards.role} --tokenizer {input.tokenizer} --out {output} "
            "--steps {params.settings[steps]} --batch-size {params.settings[batch_size]} --lr {params.settings[lr]} "
            "--seed {params.settings[seed]} --shape {params.shape} --min-image-accuracy {params.gate} "
            "--threads {threads}"


    rule vlm_prompts:
        output:
            vlm_work("prompts/question.jsonl"),
        params:
            settings=VLM["prompts"],
        localrule: True
        shell:
            "python -m harness vlm-prompts --out {WORK}/vlm/prompts --count {params.settings[count]} "
            "--seed {params.settings[seed]}"


    rule vlm_features:
        input:
            target=vlm_work("models/target"),
        output:
            directory(vlm_work("features/{kind}")),
        params:
            settings=VLM["features"],
            drop=lambda wildcards: "--drop-image" if wildcards.kind == "text" else "",
        wildcard_constraints:
            kind="full|text",
        threads: config["threads"]
        resources:
            mem_mb=4000,
            runtime=30,
        shell:
            "python -m harness vlm-features --target {input.target} --out {output} "
            "--charts {params.settings[charts]} --seq-len {params.settings[seq_len]} {params.drop} --threads {threads}"


    rule vlm_drafter:
        input:
            target=vlm_work("models/target"),
            features=lambda wildcards: vlm_work(f"features/{VLM['drafters'][wildcards.name]['data']}"),
        output:
            directory(vlm_work("drafters/{name}")),
        params:
            settings=lambda wildcards: VLM["drafters"][wildcards.name],
            options=lambda wildcards: " ".join(f"--opt {key}={value}" for key, value in
                                               VLM["drafters"][wildcards.name].get("options", {}).items()),
        wildcard_constraints:
            name="|".join(VLM["drafters"]),
        threads: config["threads"]
        resources:
            mem_mb=4000,
            runtime=60,
        shell:
            "python -m harness train --method {params.settings[method]} --target {input.target} "
            "--data {input.features} --out {output} --steps {params.settings[steps]} {params.options} "
            "--threads {threads} --metrics {WORK}/vlm/metrics/drafter-{wildcards.name}.json"


    def vlm_variant_inputs(wildcards):
        variant = VLM["variants"][wildcards.variant]
        inputs = {"target": vlm_work("models/target"), "prompts": vlm_work("prompts/question.jsonl")}
        if catalog_entry(variant["method"]).needs_draft:
            inputs["draft"] = vlm_work("models/draft")
        if variant.get("drafter"):
            inputs["drafter"] = vlm_work(f"drafters/{variant['drafter']}")
        return inputs


    rule vlm_bench:
        input:
            unpack(vlm_variant_inputs),
        output:
            vlm_work("runs/{variant}-t{temperature}.jsonl"),
        params:
            method=lambda wildcards: VLM["variants"][wildcards.variant]["method"],
            models=lambda wildcards, input: " ".join(
                f"--{name} {getattr(input, name)}" for name in ("draft", "drafter") if hasattr(input, name)),
            options=lambda wildcards: " ".join(f"--opt {key}={value}" for key, value in
                                               VLM["variants"][wildcards.variant].get("options", {}).items()),
        wildcard_constraints:
            variant="|".join(VLM["variants"]),
        threads: 1
        resources:
            mem_mb=3000,
            runtime=60,
        shell:
            "python -m harness run --method {params.method} --variant {wildcards.variant} --target {input.target} "
            "{params.models} --prompts {input.prompts} --dataset bar_charts --max-new-tokens {VLM[max_new_tokens]} "
            "--temperature {wildcards.temperature} --seed {VLM[seed]} --threads 1 --warmup 1 --pair-with-ar "
            "{params.options} --out {output}"


    rule vlm_report:
        input:
            records=vlm_records(),
            target=vlm_work("models/target"),
        output:
            report=vlm_results("vlm.md"),
            table=vlm_results("vlm.csv"),
        localrule: True
        shell:
            "python -m harness vlm-report --records {input.records} --tokenizer {input.target} --out {output.report} "
            "&& mkdir -p {RESULTS}/vlm/models && cp {WORK}/vlm/models/target/draftcount_model.json "
            "{RESULTS}/vlm/models/target.json && cp {WORK}/vlm/models/draft/draftcount_model.json "
            "{RESULTS}/vlm/models/draft.json && cp -r {WORK}/vlm/metrics {RESULTS}/vlm/"


    rule study_vlm:
        input:
            vlm_results("vlm.md"),
