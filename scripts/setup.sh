#!/usr/bin/env bash
# Sets up this checkout on a fresh Debian 12 machine: system packages (Open MPI, g++, Nsight
# Systems; for the tests also Chromium, iproute2 and SLURM with munge) and a virtual
# environment in .venv with the project.
#
#   bash scripts/setup.sh          # what `snakemake --cores 8 all` (and --report, and
#                                  # --profile profiles/slurm) needs
#   bash scripts/setup.sh test     # the above plus the test tools
#
# System packages need root (or sudo); set RING_SKIP_APT=1 to skip them.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-run}
case "$mode" in
  # slurm: the executor plugin `--profile profiles/slurm` names.
  run) extras="mpi,study,slurm" ;;
  test) extras="mpi,study,slurm,test" ;;
  *) echo "usage: bash scripts/setup.sh [run|test]" >&2; exit 2 ;;
esac

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else echo "setup: need root or sudo to run: $*" >&2; return 1
  fi
}

if [ "${RING_SKIP_APT:-0}" != 1 ]; then
  packages=(openmpi-bin libopenmpi-dev g++)
  # Debian's own python3 needs python3-venv for `python3 -m venv`.
  python3 -c "import ensurepip" 2>/dev/null || packages+=(python3-venv)
  # The report test renders the page in headless Chromium; the cluster tests bring up
  # emulated hosts (scripts/hosts.sh: ip, tc) and a SLURM cluster (scripts/slurm.sh).
  [ "$mode" = test ] && packages+=(chromium iproute2 munge slurmctld slurmd slurm-client)
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      "${missing[@]}"
  fi
  # Nsight Systems (Debian non-free) for the profiling targets; no GPU needed for CPU profiles.
  command -v nsys >/dev/null || as_root bash scripts/install_nsys.sh
fi

python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[$extras]"
# The compiled peer (--backend seed-cpp), built now so that no timed run waits for g++.
.venv/bin/python -m ring.bench.seed_cpp || echo "setup: continuing without seed-cpp" >&2
echo "setup: done (.venv with extras: $extras)"
