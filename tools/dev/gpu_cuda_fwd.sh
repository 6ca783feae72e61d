#!/usr/bin/env bash
# The H200 check of the hand-written CUDA attention forward's candidate answers (issue 33):
# tasks/solutions/candidates/sm_90a/*.md, written by `python -m tasks.solutions.dev.cuda_answers`.
#
#   1. mha_with_lse_d128 alone (fail fast; on a failure it runs again under memcheck and racecheck, then stops);
#   2. the other seven definitions at S=4096 (one trial each, target instructions counted);
#   3. the perf pass on mha_with_lse_d128 (where the time goes, beside cuDNN's kernels).
# One line per task: status, paired speedup over cuDNN, kernel and baseline ms, TFLOP/s, and the message if any.
#
# From the project's root on the GPU machine, with the project's wheels installed (../shared/device/wheels.sh):
#   bash tools/dev/gpu_cuda_fwd.sh [OUT_DIR [STEPS]]
# OUT_DIR (default: a temp folder) keeps each task's JSON report; STEPS (default "123") picks the steps, so that
# the work can be split over device calls of 10 minutes each (e.g. "12" in one call, "3" in the next).
set -uo pipefail
cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
out=${1:-$(mktemp -d)}
steps=${2:-123}
mkdir -p "$out"
answers=tasks/solutions/candidates/sm_90a
export PYTHONUNBUFFERED=1

evaluate() {  # task, answer file stem, extra flags...: print one summary line; exit status 0 iff passed
    local task=$1 stem=$2
    shift 2
    python3 -m tools.evaluate --task "$task" --arch sm_90a "$answers/$stem.md" --trials 1 --timeout-s 20 --json "$@" \
        > "$out/$task.json" 2> "$out/$task.stderr"
    python3 - "$task" "$out/$task.json" <<'PY'
import json, sys
task, path = sys.argv[1], sys.argv[2]
try:
    ev = json.load(open(path))
except ValueError:
    print(f"{task:<28} no report: see {path[:-5]}.stderr")
    sys.exit(1)
fmt = lambda v, f: "-" if v is None else format(v, f)
print(f"{task:<28} {ev['status']:<14} speedup {fmt(ev.get('speedup'), '.3f')}  "
      f"{fmt(ev.get('kernel_ms'), '.3f')} ms vs cuDNN {fmt(ev.get('baseline_ms'), '.3f')} ms  "
      f"{fmt(ev.get('tflops'), '.0f')} TFLOP/s")
if ev["status"] != "passed":
    print("    " + (ev.get("message") or "")[:2000].replace("\n", "\n    "))
sys.exit(0 if ev["status"] == "passed" else 1)
PY
}

failed=0
if [[ $steps == *1* ]]; then
echo "== 1. mha_with_lse_d128 alone"
if ! evaluate mha_with_lse_d128 mha_with_lse_d128 --profile counts; then
    echo "== failed: once more under memcheck and racecheck"
    evaluate mha_with_lse_d128 mha_with_lse_d128 --profile off --no-time --memcheck --racecheck
    exit 1
fi
fi

if [[ $steps == *2* ]]; then
echo "== 2. the other seven"
for pair in mha_with_lse_d64_s4096:mha_with_lse_d64 mha_with_lse_d64_causal_s4096:mha_with_lse_d64_causal \
    mha_with_lse_d96_s4096:mha_with_lse_d96 mha_with_lse_d96_causal_s4096:mha_with_lse_d96_causal \
    mha_with_lse_d128_causal:mha_with_lse_d128_causal gqa_with_lse_d128:gqa_with_lse_d128 \
    gqa_with_lse_d128_causal:gqa_with_lse_d128_causal; do
    evaluate "${pair%%:*}" "${pair##*:}" --profile counts || failed=$((failed + 1))
done
fi

if [[ $steps == *3* ]]; then
echo "== 3. perf pass on mha_with_lse_d128"
python3 -m tools.evaluate --task mha_with_lse_d128 --arch sm_90a "$answers/mha_with_lse_d128.md" --trials 1 \
    --timeout-s 20 --profile perf
fi
echo "== $failed failed; JSON reports in $out"
exit $((failed > 0))
