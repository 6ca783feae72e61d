#!/usr/bin/env bash
# The wheels tools/dev/probe_h200.py needs on the H200 beyond the project's own (CPython 3.12, x86-64 Linux):
#   .whl/             cupti-python 13.0.1 (it loads the image's libcupti 13.0, the one torch's nvidia-cuda-cupti
#                     brings and the driver matches) and nvidia-cudnn-frontend 1.16.0 (the graph API with
#                     sdpa_fp8, and no required dependencies: later releases need nvidia-cutlass-dsl);
#   .whl/cupti-13.4/  cupti-python 13.4.0 with its own libcupti (nvidia-cuda-cupti 13.4.92), pyelftools and
#                     cuda-pathfinder: the release that adds PM sampling. A folder of its own, installed into a
#                     --target of its own, since one install cannot hold two versions of cupti-python.
#
# From the project's root, after ../shared/device/wheels.sh (the project's dependencies; it empties .whl/):
#   bash tools/dev/probe_h200.sh
# Then one device call, carry [".whl"], command:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-cupti134 .whl/cupti-13.4/*.whl && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 || exit 1; python3 -m tools.dev.probe_h200 --out $OUT --cupti134-site /tmp/site-cupti134
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")" .whl/cupti-13.4
grep -qxF '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >> "$exclude"
download() {
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_25_x86_64 \
        --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux1_x86_64 "$@" 2> >(grep -v "^WARNING: Location" >&2)
}
download -d .whl cupti-python==13.0.1 nvidia-cudnn-frontend==1.16.0
download -d .whl/cupti-13.4 cupti-python==13.4.0 nvidia-cuda-cupti==13.4.92 pyelftools==0.33 cuda-pathfinder==1.9.1
echo "$(find .whl -type f -name '*.whl' | wc -l) wheels, $(du -sh .whl | cut -f1) in .whl/ (carry [\".whl\"]; 64 MiB with the rest of the tree)"
