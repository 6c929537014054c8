#!/usr/bin/env bash
# The GPU check: one call, at most about 6 minutes, on one machine with a CUDA GPU.
#
#   scripts/gpu_check.sh [OUTDIR]        (OUTDIR defaults to $OUT, else results/gpu/check)
#
# 1. the GPU tests (tests/test_gpu_*.py: the real device, and the simulator suites against
#    this machine's CuPy);
# 2. the reduction kernel's bandwidth sweep, 1 KiB - 1 GiB  -> OUTDIR/kernel_bw.csv + .json;
# 3. the GPU ring sweep, N = 2 and 4, 1 KiB - 1 GiB, nodes sharing the devices there are
#    (--shared-devices 1), merged                             -> OUTDIR/gpu_sweep.csv + .json;
#    with two or more GPUs also NCCL (NCCL_ALGO=Ring) beside it -> OUTDIR/gpu_nccl.csv + .json.
# Everything printed also goes to OUTDIR/gpu_check.log.
#
# It uses the machine's own python3 (PYTHON=... to choose another) with its CuPy, NumPy and
# pytest; the project's pins do not apply and nothing is installed from a registry.  A
# package the machine lacks can travel as wheels in .whl/ at the repository root (see the
# device notes: pip download --no-deps --only-binary=:all: --python-version 3.12 ...); they
# are unpacked into /tmp/ring-site first.
#
# GPU_CHECK_MAX_BYTES (default 1G) lowers the largest size of both sweeps for a quick run.
#
# Exit status: 0 all passed, 1 a phase failed or found wrong elements, 2 something needed is
# missing (checked first, in seconds).  Phases keep going after a failure, so one call says
# as much as it can; each has a time cap inside an overall budget (GPU_CHECK_BUDGET_S).
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
out=${1:-${OUT:-results/gpu/check}}
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
log="$out/gpu_check.log"
: >"$log"
PY=${PYTHON:-python3}
budget=${GPU_CHECK_BUDGET_S:-340}
max_bytes=${GPU_CHECK_MAX_BYTES:-1G}
start=$SECONDS
status=0

say() { echo "gpu_check: $*" | tee -a "$log"; }
missing() {
    say "MISSING: $*"
    exit 2
}

# Seconds a phase may take: its cap, or what is left of the budget.
allowance() {
    local left=$((budget - (SECONDS - start)))
    if ((left < $1)); then echo "$left"; else echo "$1"; fi
}

# run NAME CAP_S COMMAND...: run a phase under its time cap, log it, remember a failure.
run() {
    local name=$1 cap
    cap=$(allowance "$2")
    shift 2
    if ((cap < 10)); then
        say "$name: SKIPPED, the time budget is spent"
        status=1
        return
    fi
    say "$name: start (at most ${cap}s): $*"
    local t0=$SECONDS rc
    timeout --signal=INT --kill-after=10 "$cap" "$@" 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    if ((rc == 0)); then
        say "$name: ok in $((SECONDS - t0))s"
    else
        if ((rc == 124)); then
            say "$name: TIMED OUT after ${cap}s"
        else
            say "$name: FAILED (exit $rc)"
        fi
        status=1
    fi
}

# -- what the check needs --------------------------------------------------------------------

command -v "$PY" >/dev/null || missing "no $PY on PATH (set PYTHON=...)"
if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/ring-site .whl/*.whl || missing "could not unpack the wheels in .whl/"
    export PYTHONPATH=/tmp/ring-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
# The harness loads these plugins itself once ring.bench.backends.PLUGIN_MODULES names them.
export RING_BENCH_PLUGINS=ring.bench.gpu,ring.bench.nccl

preflight=$("$PY" - 2>&1 <<'EOF'
import importlib, sys
lost = []
for name in ("numpy", "cupy", "pytest"):
    try:
        importlib.import_module(name)
    except ImportError:
        lost.append(name)
if lost:
    sys.exit(f"python packages {', '.join(lost)} (carry them as wheels in .whl/)")
import cupy
try:
    count = cupy.cuda.runtime.getDeviceCount()
except Exception as exc:
    sys.exit(f"a CUDA device: CuPy sees none ({exc})")
if count < 1:
    sys.exit("a CUDA device: CuPy sees 0")
import ring, ring.gpu  # the project itself, from this checkout
free, total = cupy.cuda.runtime.memGetInfo()
if free < 12 << 30:
    sys.exit(f"12 GiB free on device 0 for the 1 GiB sweeps, only {free / 2**30:.1f} GiB")
print(count)
EOF
) || missing "$preflight"
devices=$(tail -n 1 <<<"$preflight")
say "python $("$PY" -c 'import sys; print(sys.version.split()[0])'), $devices CUDA device(s)"
"$PY" - <<'EOF' 2>&1 | tee -a "$log"
import cupy, numpy
rt = cupy.cuda.runtime
for d in range(rt.getDeviceCount()):
    name = rt.getDeviceProperties(d)["name"]
    print(f"gpu_check: device {d}: {name.decode() if isinstance(name, bytes) else name}")
print(f"gpu_check: cupy {cupy.__version__}, numpy {numpy.__version__}, CUDA runtime "
      f"{rt.runtimeGetVersion()}, driver {rt.driverGetVersion()}")
EOF
command -v nvidia-smi >/dev/null && nvidia-smi topo -m 2>&1 | tee -a "$log"

backends=$("$PY" -c 'from ring.bench.backends import available_backends as a; print(*a())' 2>&1) ||
    missing "the harness ring.bench does not load: $backends"
[[ " $backends " == *" gpu "* ]] || missing "ring.bench has no gpu backend (found: $backends)"
"$PY" -m ring.bench --help 2>&1 | grep -q -- "--shared-devices" ||
    missing "ring.bench has no --shared-devices flag, which the shared-device sweep needs"

# -- 1. tests --------------------------------------------------------------------------------

run tests 130 "$PY" -m pytest -q -rs -p no:cacheprovider \
    tests/test_gpu_device.py tests/test_gpu_simulated.py tests/test_gpu_fakecuda.py \
    tests/test_gpu_bench.py

# -- 2. the reduction kernel against the copy --------------------------------------------------

run kernel-bw 45 "$PY" -m ring.bench.kernel_bw -b 1K -e "$max_bytes" -f 2 -n 20 -w 5 -d float32 -o sum \
    --device 0 --out "$out/kernel_bw.csv"

# -- 3. the GPU ring, N = 2 and 4 on shared devices, then merged -------------------------------

parts=$(mktemp -d)
sweep=(-b 1K -e "$max_bytes" -f 2 -n 20 -w 5 -d float32 -o sum --backend gpu --shared-devices 1)
run "gpu sweep N=2" 60 "$PY" -m ring.bench "${sweep[@]}" --nodes 2 --out "$parts/gpu_n2.csv"
run "gpu sweep N=4" 110 "$PY" -m ring.bench "${sweep[@]}" --nodes 4 --out "$parts/gpu_n4.csv"
done_parts=()
for part in "$parts"/gpu_n2.csv "$parts"/gpu_n4.csv; do
    [[ -f $part ]] && done_parts+=("$part")
done
if ((${#done_parts[@]})); then
    run merge 20 "$PY" -m ring.bench merge --out "$out/gpu_sweep.csv" "${done_parts[@]}"
fi
rm -rf "$parts"

if ((devices >= 2)); then
    nodes=2
    ((devices >= 4)) && nodes=2,4
    run "gpu and nccl, one node per device" 60 env NCCL_ALGO=Ring "$PY" -m ring.bench \
        -b 1K -e "$max_bytes" -f 4 -n 20 -w 5 --backend gpu,nccl --nodes "$nodes" \
        --out "$out/gpu_nccl.csv"
else
    say "nccl: skipped, NCCL needs one GPU per node and this machine has $devices"
fi

# -- summary ---------------------------------------------------------------------------------

"$PY" - "$out" <<'EOF' 2>&1 | tee -a "$log"
import csv, json, sys
from pathlib import Path

out = Path(sys.argv[1])


def rows(name):
    path = out / name
    return list(csv.DictReader(path.open())) if path.exists() else []


def num(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


kernel = rows("kernel_bw.csv")
for r in kernel:
    if int(r["bytes"]) >= 64 << 20:
        print(f"kernel-bw {int(r['bytes']) >> 20:>5} MiB: kernel {num(r['kernel_GBps'])} GB/s, "
              f"copy {num(r['copy_GBps'])} GB/s, kernel/copy {num(r['kernel_vs_copy'])}, "
              f"wrong {r['wrong']}")
sweep = rows("gpu_sweep.csv")
copy = None
if sweep:
    ceilings = json.loads((out / "gpu_sweep.json").read_text()).get("ceilings") or {}
    copy = (ceilings.get("gpu_copy_GBps") or {}).get("0")
    print(f"gpu copy ceiling (device 0, bytes read + written): {copy} GB/s")
for r in sweep:
    if int(r["bytes"]) in (64 << 20, 256 << 20, 1 << 30):
        traffic = num(r["traffic_GBps"])
        share = traffic / copy if traffic and copy else None
        print(f"gpu N={r['nodes']} {int(r['bytes']) >> 20:>5} MiB: time {r['time_us']} us, "
              f"traffic {traffic} GB/s (x{share} of copy), busbw {r['busbw_GBps']} GB/s, "
              f"wrong {r['wrong']}")
every = kernel + sweep + rows("gpu_nccl.csv")
print(f"wrong elements in all sweeps: {sum(int(r['wrong'] or 0) for r in every)}")
EOF
say "done in $((SECONDS - start))s; results in $out; status $status"
exit $status
