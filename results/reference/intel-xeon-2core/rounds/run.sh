#!/bin/bash
# The rounds' warm-up: 2d2bede (warm-ups when each point is loaded) against b960e48 (just
# before its first timed calls), in turn, three pairs.
set -u
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PY=/work/main/.venv/bin/python
COMMON="-b 64 -e 16K -f 4 -n 20 -w 3 --rounds 5 -c 1"
ALG=reduce-broadcast,direct
for i in 1 2 3; do
  for v in before:/tmp/old after:/work/main; do
    name=${v%%:*}; dir=${v#*:}
    cd $dir
    $PY -m ring.bench --backend cpu,numpy-direct --executor slices --algorithm $ALG --nodes 2,4 \
        $COMMON --out /tmp/rounds/cpu_${name}_$i.csv > /tmp/rounds/cpu_${name}_$i.log 2>&1 || echo FAIL cpu $name $i
    for n in 2 4; do
      mpirun --oversubscribe -n $n $PY -m mpi4py -m ring.bench --backend mpi,mpi-allreduce \
          --algorithm $ALG $COMMON --out /tmp/rounds/mpi_n${n}_${name}_$i.csv > /tmp/rounds/mpi_n${n}_${name}_$i.log 2>&1 || echo FAIL mpi $n $name $i
    done
  done
done
echo done
