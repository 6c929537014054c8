#!/bin/sh
# Install the Nsight Systems CLI (nsys) from Debian's non-free component.
#
# Usage (as root, on Debian 12 "bookworm"):  sh scripts/install_nsys.sh
#
# Safe to run again: every step checks first.  No GPU or driver is needed to profile CPU
# work; the packages pull Debian's libcuda1 stub along.  On GPU hosts with a CUDA toolkit,
# prefer the toolkit's own (newer) nsys and do not run this.
set -eu

log() { printf 'install_nsys: %s\n' "$*"; }
die() { printf 'install_nsys: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (e.g. sudo sh $0)"
[ -r /etc/os-release ] || die "/etc/os-release not found; this helper supports Debian 12 only"
# shellcheck source=/dev/null
. /etc/os-release
[ "${ID:-}" = debian ] || die "this helper supports Debian 12 only (found ${PRETTY_NAME:-unknown})"
codename="${VERSION_CODENAME:-bookworm}"
[ "$codename" = bookworm ] || log "warning: tested on bookworm only, found $codename; trying anyway"

arch="$(dpkg --print-architecture)"
[ "$arch" = amd64 ] || die "Debian ships nsight-systems for amd64 only (this machine: $arch)"

# Debian's package puts the CLI under the multiarch directory but its importer under
# /usr/lib/nsight-systems; nsys looks for the importer next to itself and, without this
# link, leaves only a .qdstrm file ("The importer binary and its dependencies were not found").
importer_src=/usr/lib/nsight-systems/host-linux-x64
importer_link=/usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64

export DEBIAN_FRONTEND=noninteractive
# The machine's apt configuration, whose Debian mirror the non-free source reuses.
apt_etc="${INSTALL_NSYS_APT_ETC:-/etc/apt}"
# shellcheck source=apt_mirror.sh
. "$(dirname "$0")/apt_mirror.sh"

installed="$(dpkg-query -W -f='${Status}\n' nsight-systems nsight-systems-target 2>/dev/null \
    | grep -c 'install ok installed' || true)"
if [ "$installed" -ne 2 ]; then
    if ! apt-cache show nsight-systems >/dev/null 2>&1; then
        log "enabling Debian's contrib and non-free components from this machine's mirror"
        sources="$(enable_non_free "$apt_etc" "$codename")" || die "cannot enable non-free"
        log "apt source: $sources"
        apt-get update
        apt-cache show nsight-systems >/dev/null 2>&1 \
            || die "package nsight-systems not found even with $sources; check apt sources"
    fi
    log "installing nsight-systems nsight-systems-target (about 170 MB)"
    # Lists cached long ago can name files the mirror no longer has: refresh once and retry.
    apt-get install -y --no-install-recommends nsight-systems nsight-systems-target \
        || { apt-get update && apt-get install -y --no-install-recommends \
                nsight-systems nsight-systems-target; }
else
    log "nsight-systems and nsight-systems-target already installed"
fi

[ -d "$importer_src" ] || die "$importer_src missing after install; package layout changed?"
if [ "$(readlink "$importer_link" 2>/dev/null || true)" != "$importer_src" ]; then
    if [ -e "$importer_link" ] && [ ! -L "$importer_link" ]; then
        log "$importer_link exists and is not a link; leaving it alone"
    else
        log "linking the importer: $importer_link -> $importer_src"
        ln -sfn "$importer_src" "$importer_link"
    fi
fi

command -v nsys >/dev/null 2>&1 || die "nsys is not on PATH after install"
nsys --version
