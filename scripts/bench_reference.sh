#!/usr/bin/env bash
# The committed reference sweeps, run on a quiet machine:
# - cpu_sweep: cpu (both sync modes) and numpy-direct in one run, mpi-allreduce in one mpirun
#   launch per node count, merged into results/reference/<host-kind>/cpu_sweep.csv + .json;
# - mpi_sweep: our ring over MPI ranks (mpi) and mpi-allreduce in the same launch, per node
#   count, merged into results/reference/<host-kind>/mpi_sweep.csv + .json;
# - cpu_algorithms, mpi_algorithms: at N = 2, every algorithm beside the kind's peers in one
#   run, with the flags of the workflow's algorithm runs (config/config.yaml, algorithms:).
# A report shows such a folder in its Other machines section, with its machine, date and
# commit; it never feeds the findings of the machine that builds the report.
#
#   scripts/bench_reference.sh HOST_KIND [MAX_BYTES]     e.g. scripts/bench_reference.sh epyc-2core
set -euo pipefail

host_kind=${1:?usage: scripts/bench_reference.sh HOST_KIND [MAX_BYTES]}
max_bytes=${2:-256M}
out=results/reference/$host_kind
runs=results/reference_runs/$host_kind  # merged below; the merged JSON keeps every run
python=${PYTHON:-python}
sweep=(-b 1K -e "$max_bytes" -f 2 -n 20 -w 5 -d float32 -o sum --seed 0)

mpirun_args=(--oversubscribe)  # N = 4 on a 2-core machine
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

mkdir -p "$runs"
"$python" -m ring.bench "${sweep[@]}" --backend cpu,numpy-direct --sync pairwise,barrier \
    --nodes 2,4 --out "$runs/cpu.csv"
for nodes in 2 4; do
    mpirun "${mpirun_args[@]}" -n "$nodes" "$python" -m ring.bench "${sweep[@]}" \
        --backend mpi-allreduce --out "$runs/mpi-allreduce-n$nodes.csv"
done
"$python" -m ring.bench merge --out "$out/cpu_sweep.csv" \
    "$runs/cpu.csv" "$runs/mpi-allreduce-n2.csv" "$runs/mpi-allreduce-n4.csv"
for nodes in 2 4; do
    mpirun "${mpirun_args[@]}" -n "$nodes" "$python" -m ring.bench "${sweep[@]}" \
        --backend mpi,mpi-allreduce --out "$runs/mpi-n$nodes.csv"
done
"$python" -m ring.bench merge --out "$out/mpi_sweep.csv" "$runs/mpi-n2.csv" "$runs/mpi-n4.csv"

algorithms=(-b 1K -e 64M -f 4 -n 20 -w 5 -c 1 -d float32 -o sum --seed 0 -a 3 --out-of-place 0)
algorithms+=(--rounds 5 --nodes 2)
every=$("$python" -c "from ring.schedule import algorithms_of; print(','.join(algorithms_of('allreduce')))")
algorithms+=(--algorithm "$every")
"$python" -m ring.bench "${algorithms[@]}" --backend cpu,numpy-direct,seed-cpp --sync pairwise \
    --executor nodes,slices --out "$out/cpu_algorithms.csv"
mpirun "${mpirun_args[@]}" -n 2 "$python" -m mpi4py -m ring.bench "${algorithms[@]}" \
    --backend mpi,mpi-allreduce --buffers host,shared --out "$out/mpi_algorithms.csv"
