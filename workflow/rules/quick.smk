# The quick GPU check (target `quick`; workflow/config/gpu-quick.yaml, entry: bash workflow/scripts/gpu_quick.sh):
# the CUDA tests beside the zoo's training, every catalog method's float32 lossless run, and the paired speedup
# table under the default engine and each engine pass, with the report. Each stage writes into results_dir as it
# finishes; the entry script writes the folder's README.md before and after.


rule cuda_tests:
    # always succeeds: a failing CUDA test is a finding for the README, not a reason to skip the timed stages
    output:
        check_path("pytest_cuda.txt"),
    params:
        arguments=QUICK.get("cuda_tests", "-m cuda"),
    resources:
        mem_mb=8000,
        runtime=30,
    shell:
        "set +e; python -m pytest {params.arguments} -q -p no:cacheprovider > {output}.partial 2>&1;"
        " echo \"exit status $?\" >> {output}.partial; mv {output}.partial {output}"


def quick_outputs():
    outputs = [check_path("pytest_cuda.txt"), check_path("lossless.csv"), results("tables/summary.csv"),
               results("report.md")]
    return outputs + expand(results("tables/summary_{pass}.csv"), **{"pass": engine_passes()})


rule quick:
    input:
        quick_outputs(),
