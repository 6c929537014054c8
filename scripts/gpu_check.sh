#!/usr/bin/env bash
# The GPU check: one call, at most 6 minutes, on one machine with a CUDA GPU.
#
#   scripts/gpu_check.sh [OUTDIR]        (OUTDIR defaults to $OUT, else results/gpu/check)
#
# 1. the GPU tests (tests/test_gpu_*.py: the real device, our reduction kernel on it and
#    compiled as C++ where g++ exists, CUDA graphs and the simulator suites against this
#    machine's CuPy);
# 2. the reduction kernel's bandwidth sweep, ours and CuPy's ufunc beside the device copy,
#    1 KiB - 1 GiB                                            -> OUTDIR/kernel_bw.csv + .json;
# 3. the GPU ring sweep with CUDA graphs off and on (--graphs 0,1), nodes sharing the
#    devices there are (--shared-devices 1): N = 2 and 4 at 1 KiB - 1 GiB (x2), N = 8 at
#    1 KiB - 1 GiB (x4), merged                              -> OUTDIR/gpu_sweep.csv + .json;
#    with two or more GPUs also NCCL (NCCL_ALGO=Ring) beside it -> OUTDIR/gpu_nccl.csv + .json;
#    then ring against ring-segmented (its blocks on two streams per node, copies of one
#    overlapping reductions of the other) in one invocation, at 256 MiB, N = 2 and 4,
#    shared devices, --force-peer-copies 1, graphs on     -> OUTDIR/gpu_overlap.csv + .json;
# 4. a 4-node Nsight Systems profile (1 - 16 MiB, graphs off, shared devices), with the nsys
#    on PATH or the one inside Nsight Compute; its importer link is made when missing and
#    libraries carried in .nsyslib/ go on LD_LIBRARY_PATH (the recipe of NSYS.md)
#                                                       -> OUTDIR/profiles/4gpu/ (no .sqlite);
# 5. with snakemake importable (carried as wheels), and time left:
#    snakemake --cores 16 gpu kernel_bw nsys_4gpu --config gpus=1 shared_devices=true
#                                                        -> OUTDIR/snakemake/ (its results).
# Everything printed also goes to OUTDIR/gpu_check.log; the last lines are the figures the
# issue asks for, each beside its target.
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

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 0
fi
if (($# > 1)); then
    echo "gpu_check: usage: scripts/gpu_check.sh [OUTDIR] (one argument at most, got $#)" >&2
    exit 2
fi
cd "$(dirname "$0")/.." || exit 2
out=${1:-${OUT:-results/gpu/check}}
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
log="$out/gpu_check.log"
: >"$log"
PY=${PYTHON:-python3}
budget=${GPU_CHECK_BUDGET_S:-350}
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
export RING_BENCH_PLUGINS=ring.bench.backends.gpu,ring.bench.backends.nccl

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
if free < 20 << 30:
    sys.exit(f"20 GiB free on device 0 for the 1 GiB sweeps (N = 8: 16 GiB), only "
             f"{free / 2**30:.1f} GiB")
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

run tests 110 "$PY" -m pytest -q -rs -p no:cacheprovider \
    tests/test_gpu_device.py tests/test_gpu_simulated.py tests/test_gpu_fakecuda.py \
    tests/test_gpu_bench.py tests/test_gpu_kernels.py tests/test_gpu_kernels_device.py \
    tests/test_gpu_graphs.py

# -- 2. the reduction kernel against the copy --------------------------------------------------

run kernel-bw 50 "$PY" -m ring.bench.kernel_bw -b 1K -e "$max_bytes" -f 2 -n 20 -w 5 \
    -d float32 -o sum --kernel ring,ufunc --device 0 --out "$out/kernel_bw.csv"

# -- 3. the GPU ring, N = 2 and 4 on shared devices, then merged -------------------------------

parts=$(mktemp -d)
# -w 5: the first call on new buffers runs eagerly and the second captures the graph, so
# every timed call replays it.
sweep=(-b 1K -e "$max_bytes" -n 20 -w 5 -d float32 -o sum --backend gpu --shared-devices 1
    --graphs 0,1)
run "gpu sweep N=2" 45 "$PY" -m ring.bench "${sweep[@]}" -f 2 --nodes 2 --out "$parts/gpu_n2.csv"
run "gpu sweep N=4" 60 "$PY" -m ring.bench "${sweep[@]}" -f 2 --nodes 4 --out "$parts/gpu_n4.csv"
run "gpu sweep N=8" 50 "$PY" -m ring.bench "${sweep[@]}" -f 4 --nodes 8 --out "$parts/gpu_n8.csv"
done_parts=()
for part in "$parts"/gpu_n2.csv "$parts"/gpu_n4.csv "$parts"/gpu_n8.csv; do
    [[ -f $part ]] && done_parts+=("$part")
done
if ((${#done_parts[@]})); then
    run merge 20 "$PY" -m ring.bench merge --out "$out/gpu_sweep.csv" "${done_parts[@]}"
fi
rm -rf "$parts"

# Issue 11's GPU target: ring-segmented's busbw >= 1.2x the ring's, same run.
run "gpu overlap ring vs ring-segmented" 50 "$PY" -m ring.bench -b 256M -e 256M -n 20 -w 5 \
    -d float32 -o sum --backend gpu --shared-devices 1 --graphs 1 --force-peer-copies 1 \
    --algorithm ring,ring-segmented --nodes 2,4 --out "$out/gpu_overlap.csv"

if ((devices >= 2)); then
    nodes=2
    ((devices >= 4)) && nodes=2,4
    run "gpu and nccl, one node per device" 60 env NCCL_ALGO=Ring "$PY" -m ring.bench \
        -b 1K -e "$max_bytes" -f 4 -n 20 -w 5 --backend gpu,nccl --nodes "$nodes" \
        --out "$out/gpu_nccl.csv"
else
    say "nccl: skipped, NCCL needs one GPU per node and this machine has $devices"
fi

# -- 4. a 4-node profile ---------------------------------------------------------------------

nsys_ready() {
    # The nsys ring.nsys finds (PATH, else inside Nsight Compute); make its importer work.
    local nsys base
    [[ -d .nsyslib ]] && export LD_LIBRARY_PATH=$PWD/.nsyslib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    nsys=$("$PY" -c 'from ring.nsys.tool import find_nsys; print(find_nsys() or "")') || return 1
    [[ -n $nsys ]] || { say "profile: SKIPPED, no nsys on PATH nor inside Nsight Compute"; return 1; }
    base=$(dirname "$(dirname "$(readlink -f "$nsys")")")
    if [[ ! -e $base/host-linux-x64 && -d $base/linux-desktop-glibc_2_11_3-x64 ]]; then
        ln -s "$base/linux-desktop-glibc_2_11_3-x64" "$base/host-linux-x64" &&
            say "profile: linked $base/host-linux-x64 (where nsys looks for QdstrmImporter)"
    fi
    NSYS=$nsys
}
if nsys_ready; then
    prof="$out/profiles"
    mkdir -p "$prof/4gpu"
    run "nsys check" 30 "$PY" -m ring.nsys check --nsys "$NSYS"
    run "profile 4gpu" 60 "$PY" -m ring.nsys profile --name 4gpu --root "$prof" --gpus 1 \
        --nsys "$NSYS" -- "$PY" -m ring.bench -b 1M -e 16M -f 4 -n 3 -w 1 --backend gpu \
        --shared-devices 1 --nodes 4 --graphs 0 --out "$prof/4gpu/bench.csv"
    rm -f "$prof"/4gpu/*.sqlite "$prof"/4gpu/*.qdstrm
fi

# -- 5. the workflow's GPU targets -------------------------------------------------------------

if "$PY" -c 'import snakemake' 2>/dev/null; then
    work=$(mktemp -d)
    cp -r Snakefile config workflow profiles envs "$work"/ && mkdir -p "$work/results"
    nsys_dir=$(dirname "${NSYS:-/nonexistent/nsys}")
    run snakemake 120 env PATH="$nsys_dir:$PATH" bash -c "cd '$work' && '$PY' -m snakemake \
        --cores 16 gpu kernel_bw nsys_4gpu --config gpus=1 shared_devices=true"
    mkdir -p "$out/snakemake"
    cp -r "$work/results/gpu" "$work/results/logs" "$out/snakemake/" 2>/dev/null
    if [[ -d $work/results/profiles/4gpu ]]; then
        cp -r "$work/results/profiles" "$out/snakemake/"
        rm -f "$out"/snakemake/profiles/*/*.sqlite
    fi
    rm -rf "$work"
else
    say "snakemake: skipped, not importable (carry its wheels in .whl/ to run the workflow targets)"
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
        print(f"kernel-bw {r.get('kernel', 'ufunc'):>5} {int(r['bytes']) >> 20:>5} MiB: kernel "
              f"{num(r['kernel_GBps'])} GB/s, copy {num(r['copy_GBps'])} GB/s, kernel/copy "
              f"{num(r['kernel_vs_copy'])} (target for ring: >= 0.95), wrong {r['wrong']}")
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
        print(f"gpu N={r['nodes']} graphs={r.get('graphs', '0')} {int(r['bytes']) >> 20:>5} MiB: "
              f"time {r['time_us']} us, traffic {traffic} GB/s (x{share} of copy; target at "
              f"256 MiB and 1 GiB, N = 2 and 4: >= 0.85), busbw {r['busbw_GBps']} GB/s, "
              f"wrong {r['wrong']}")
targets = {(2, 1024): 12, (4, 1024): 25, (4, 1 << 20): 30}
for r in sweep:
    key = (int(r["nodes"]), int(r["bytes"]))
    if int(r["bytes"]) in (1024, 1 << 20):
        goal = targets.get(key)
        print(f"gpu N={r['nodes']} graphs={r.get('graphs', '0')} {int(r['bytes'])} B: time "
              f"{r['time_us']} us" + (f" (target <= {goal} us)" if goal else ""))
overlap = rows("gpu_overlap.csv")
busbw = {(r["nodes"], r["algorithm"]): num(r["busbw_GBps"]) for r in overlap}
for nodes in sorted({r["nodes"] for r in overlap}, key=int):
    ring, segmented = busbw.get((nodes, "ring")), busbw.get((nodes, "ring-segmented"))
    ratio = segmented / ring if ring and segmented else None
    print(f"gpu overlap N={nodes} 256 MiB --force-peer-copies 1: busbw ring {ring} GB/s, "
          f"ring-segmented {segmented} GB/s, ratio {ratio} (target >= 1.2)")
every = kernel + sweep + overlap + rows("gpu_nccl.csv")
print(f"wrong elements in all sweeps: {sum(int(r['wrong'] or 0) for r in every)}")
EOF
say "done in $((SECONDS - start))s; results in $out; status $status"
exit $status
