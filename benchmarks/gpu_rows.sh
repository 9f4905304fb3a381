#!/usr/bin/env bash
# The GPU checks in one command: every `gpu`-marked test, then the GPU row of each family's
# benchmark, each step bounded by its own time limit so that one slow step cannot take the
# others down. Written for a short loan of a CUDA machine (at most 21 min 15 s of work in
# all by the limits, about 10 minutes on an H200: each benchmark cell starts a child process,
# and its CUDA start-up costs 10-20 s there). Run it with a 10-minute budget and the last
# steps may be cut; the new work's steps come first.
#
# Usage, from the repository root of a machine with CUDA and the package's dependencies:
#
#     bash benchmarks/gpu_rows.sh [OUTDIR]      # logs in OUTDIR (benchmarks/results/gpu)
#
# PYTHON names the interpreter (python3). Every log ends up in OUTDIR, one per step (ten:
# tar them where only eight files come back), and the last lines of each are echoed as the step ends.
set -u
out=${1:-benchmarks/results/gpu}
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 SCIPY_ARRAY_API=1 MKL_CBWR=AUTO,STRICT
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

step() {  # step NAME LIMIT_SECONDS TAIL_LINES COMMAND...
    local name=$1 limit=$2 lines=$3 start rc
    shift 3
    echo "=== $name (limit ${limit} s): $*"
    start=$(date +%s)
    timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1
    rc=$?
    echo "--- $name: exit $rc after $(($(date +%s) - start)) s"
    tail -n "$lines" "$out/$name.log"
}

step tests 120 25 "$py" -m pytest -q -m gpu -p no:cacheprovider -p no:randomly \
    tests/test_show_versions.py tests/test_memory.py tests/test_krylov.py tests/test_gpu_pickles.py \
    tests/pathwise/test_functions.py tests/dkp/test_estimator.py tests/dkp/test_riccati.py \
    tests/dkp/test_sparse_estimator.py \
    tests/qep/test_estimator.py tests/kepsvgp/test_estimator.py tests/drd/test_estimator.py
# the inducing-point DKP: its solvers against Adam at P = 100 000, m = 256, and the
# 1e6-row prediction
step dkp_sparse 270 30 "$py" benchmarks/dkp/inducing.py --device cuda --methods newton,auto,lbfgs,adam \
    --adam-lrs 1e-2 --max-minutes 1 --max-passes 400 --parts fit,predict
step classifier 200 40 "$py" benchmarks/pathwise/classifier.py --device cuda \
    --parts gpytorch,scale,draws --cutoff 150
step robust 200 15 "$py" benchmarks/pathwise/robust.py --device cuda --parts scale --cutoff 180
step pathwise_scaling 150 30 "$py" benchmarks/pathwise/scaling.py --device cuda \
    --configs 2000x8000,1000x100000 --methods numpy-chol,ours,botorch --repeats 3 --cutoff 45
step pathwise_cg 80 30 "$py" benchmarks/pathwise/cg.py --device cuda --ranks 100 --cutoff 60 \
    --parts scale,oracle
step dkp 80 25 "$py" benchmarks/dkp/vs_adam.py --device cuda --dataset diabetes \
    --lrs 0.03,0.01 --adam-budget 25 --repeats 2 --reference-sweeps 30
step qep 60 25 "$py" benchmarks/qep/bundled.py --device cuda --datasets breast_cancer,digits \
    --models q1,q2 --epochs 50
step kepsvgp 45 30 "$py" benchmarks/kepsvgp/timing.py --device cuda --cutoff 10
# basis="dense" is left out: at p = 256 it needs 33 iterations and more than 40 s on an H200
# (43 s on one CPU thread), overhead-bound at that size on either device.
step drd 100 25 "$py" benchmarks/drd/scale.py --device cuda --grids 32,64 --basis fourier \
    --repeats 1 --cutoff 60
