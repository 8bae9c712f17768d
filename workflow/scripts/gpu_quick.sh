#!/usr/bin/env bash
# The quick GPU check, one command (docs/gpu.md#the-quick-check): about 8 minutes on one H100 by design.
#
#   bash workflow/scripts/gpu_quick.sh [--cpu] [--out DIR] [--work DIR] [--wheels DIR] [--minutes N] [--cores N]
#
# 1. installs the carried wheels (made with `python -m harness gpu-wheels`) when Snakemake is missing;
# 2. writes DIR/README.md (state: running), then runs Snakemake's four stages in turn with
#    workflow/config/gpu-quick.yaml (with --cpu: workflow/config/gpu-quick-cpu.yaml over it, smoke size on a CPU):
#    quick_timed (the zoo, the timed paired runs alone on the GPU, bare-loop and dispatch), quick_engine (engine
#    efficiency at Llama-3.1-8B's shape, with its own deadline), quick_lossless, quick_cuda (the CUDA tests); each
#    stage gets the time the earlier ones left of --minutes (default 8), so what finished is kept and a stage that
#    fails does not stop the next;
# 3. writes DIR/README.md again: what ran, on which device, with which versions, each stage's time and figures.
# Exit status: Snakemake's (124 when it was stopped at the time limit).
set -uo pipefail
cd "$(dirname "$0")/../.."

cpu=0; out=""; work=""; wheels=".whl"; minutes="8"; cores="$(nproc)"
while [ $# -gt 0 ]; do
    case "$1" in
        --cpu) cpu=1 ;;
        --out) out="$2"; shift ;;
        --work) work="$2"; shift ;;
        --wheels) wheels="$2"; shift ;;
        --minutes) minutes="$2"; shift ;;
        --cores) cores="$2"; shift ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "gpu_quick.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

configs=(workflow/config/gpu-quick.yaml)
[ "$cpu" = 1 ] && configs+=(workflow/config/gpu-quick-cpu.yaml)
if [ -z "$out" ]; then out="$([ "$cpu" = 1 ] && echo results-gpu-quick-cpu || echo results-gpu-quick)"; fi
if [ -z "$work" ]; then work="$([ "$cpu" = 1 ] && echo work-gpu-quick-cpu || echo work-gpu-quick)"; fi
started="$(date +%s)"
PYTHON="${PYTHON:-python3}"

if ! "$PYTHON" -c "import snakemake" 2>/dev/null; then
    if [ ! -d "$wheels" ]; then
        echo "gpu_quick.sh: snakemake is not installed and there is no wheel folder $wheels" \
             "(make one with: python -m harness gpu-wheels --out $wheels)" >&2
        exit 2
    fi
    site="${TMPDIR:-/tmp}/draftcount-site"
    "$PYTHON" -m harness gpu-install --wheels "$wheels" --target "$site" || exit 2
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    export PATH="$site/bin:$PATH"
fi

command="bash workflow/scripts/gpu_quick.sh$([ "$cpu" = 1 ] && echo ' --cpu')"
readme() { "$PYTHON" -m harness quick-readme --results "$out" --work "$work" --started "$started" \
               --state "$1" --ran "$command"; }
readme running

deadline=$(( started + $(awk "BEGIN {print int($minutes * 60)}") ))
state="finished"
: > "$out/snakemake.log"
for stage in quick_timed quick_engine quick_lossless quick_cuda; do
    left=$(( deadline - $(date +%s) ))
    if [ "$left" -le 5 ]; then
        echo "gpu_quick.sh: no time left for $stage" | tee -a "$out/snakemake.log"
        state="timed out after $minutes min (before $stage)"
        break
    fi
    echo "gpu_quick.sh: stage $stage, $left s left" | tee -a "$out/snakemake.log"
    timeout --signal=TERM --kill-after=20 "$left" \
        "$PYTHON" -m snakemake "$stage" --configfile "${configs[@]}" --config "work_dir=$work" "results_dir=$out" \
        --cores "$cores" --resources gpu=1 --scheduler greedy --keep-going --rerun-incomplete --printshellcmds \
        > >(tee -a "$out/snakemake.log") 2>&1
    status=$?
    case "$status" in
        0) ;;
        124|137) state="timed out after $minutes min (in $stage)"; break ;;
        *) state="failed (stage $stage: snakemake exit status $status; see snakemake.log)" ;;
    esac
done
readme "$state, $(( $(date +%s) - started )) s"
case "$state" in finished) exit 0 ;; timed*) exit 124 ;; *) exit 1 ;; esac
