#!/usr/bin/env bash
# The whole GPU check of issue 6 (point 3) as one command, for a machine with a CUDA device and torch on it:
#
#     bash bench/gpu_session.sh OUTDIR
#
# 1. installs the wheels in .whl/ (if any) into /tmp/site, for packages that machine lacks (pydantic);
# 2. builds the C loops in place (the CPU side of the parity checks and timings);
# 3. bench/gpu_check.py: CPU/GPU parity, kernels in tokens/s, end to end (OUTDIR/gpu_check.json), then
#    bench/timeline.py on one run of gae and grpo per device (OUTDIR/timeline.log: where a run waits);
# 4. the CUDA tests (hypothesis CPU/GPU parity on random batches, the pipeline's cuda == cpu);
# 5. the whole test suite, where `--device auto` now means the GPU (pytest-xdist when present), cut off
#    after RLADV_SUITE_S seconds (default 180).
# Each step logs to OUTDIR; the exit status is gpu_check.py's (1: a parity check outside 1e-5).
out=${1:?usage: bench/gpu_session.sh OUTDIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 3
    export PYTHONPATH=/tmp/site:$PWD
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
nproc | sed 's/^/cpu cores: /' | tee -a "$out/device.txt"
python3 setup.py -q build_ext --inplace >"$out/build.log" 2>&1 || echo "C loops not built: see build.log"
python3 -c "import array_api_compat" 2>/dev/null \
    || { echo "array-api-compat is missing: put its wheel in .whl/ (pip download --no-deps array-api-compat)"; exit 3; }
python3 -c "import rladv_cli, torch; assert torch.cuda.is_available(), 'torch sees no CUDA device'" || exit 4

python3 bench/gpu_check.py --out "$out" 2>&1 | tee "$out/gpu_check.log"
check=${PIPESTATUS[0]}

echo "== timelines of one run each, 20M tokens (bench/timeline.py)"
data=${RLADV_BENCH_DATA:-bench/data}/bench_20000000.parquet
for est in gae grpo; do for dev in cuda cpu; do
    echo "-- $est --device $dev" | tee -a "$out/timeline.log"
    python3 bench/timeline.py compute --estimator $est "$data" -o /tmp/rladv_timeline.parquet -q --device $dev \
        2>&1 | tee -a "$out/timeline.log"
done; done

echo "== CUDA tests"
python3 -m pytest -q -p no:cacheprovider tests/estimators/test_properties.py tests/pipeline/test_pipeline.py \
    tests/loss/test_token_weight_properties.py -k cuda >"$out/pytest_cuda.log" 2>&1
tail -n 3 "$out/pytest_cuda.log"

echo "== whole suite on the GPU machine"
workers=$(python3 -c "import xdist" 2>/dev/null && echo "-n $(( $(nproc) > 12 ? 12 : $(nproc) ))")
timeout "${RLADV_SUITE_S:-180}" python3 -m pytest -q -p no:cacheprovider -rfE $workers tests >"$out/pytest_suite.log" 2>&1
suite=$?
echo "pytest exit $suite (124: cut off)"
grep -E "^(FAILED|ERROR)|passed|failed" "$out/pytest_suite.log" | tail -n 25
[ "$suite" = 124 ] && tail -c 600 "$out/pytest_suite.log"
exit "$check"
