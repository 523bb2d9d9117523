#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU and driver, what cdplane sees of it, through the
# same code paths the kubelet plugin uses on a node. Run it from the repository root:
#
#   hack/gpu-check.sh [driver-root]        (default: $NVIDIA_DRIVER_ROOT, else /)
#
# It builds the image's binaries for this machine and prints:
#   1. each binary's --version;
#   2. the loaded kernel driver (/proc/driver/nvidia/version) and the driver root's IMEX binaries;
#   3. `cdplane-nvml discover`: libnvidia-ml.so.1 found under the driver root and loaded by its
#      full path, every GPU with its raw fabric state, and the clique the plugin derives ("none
#      (no NVLink fabric)" on a GPU without an NVLink fabric, e.g. an H100 or H200 outside an
#      NVL72 rack: that is a correct answer, not a failure);
#   4. nvidia-smi's own view of the fabric, when nvidia-smi is installed, to compare.
# Exit status: that of `cdplane-nvml discover` (0 when a clique, or none, was derived).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="${1:-${NVIDIA_DRIVER_ROOT:-/}}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"

echo "== Building the image's binaries ($(go env GOOS)/$(go env GOARCH))"
go build -o "$out/" ./cmd/... || exit 1

echo "== Versions"
for b in "$out"/*; do
	"$b" --version 2>&1 | head -n1
done

echo "== Kernel driver"
cat /proc/driver/nvidia/version 2>/dev/null || echo "(no /proc/driver/nvidia/version: the NVIDIA kernel driver is not loaded)"
echo "== Driver root $root"
for name in nvidia-imex nvidia-imex-ctl; do
	found=""
	for d in usr/bin usr/sbin bin sbin opt/bin; do
		if [ -x "$root/$d/$name" ]; then found="$root/$d/$name"; break; fi
	done
	echo "$name: ${found:-not installed (the nvidia-imex package of the driver; needed for ComputeDomains)}"
done
ls -l "$root/dev/nvidiactl" /dev/nvidiactl 2>/dev/null | head -n1 || echo "/dev/nvidiactl: absent"

echo "== cdplane-nvml discover --driver-root $root"
"$out/cdplane-nvml" discover --driver-root "$root"
rc=$?

if command -v nvidia-smi >/dev/null 2>&1; then
	echo "== nvidia-smi (for comparison)"
	nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv,noheader
	nvidia-smi -q | grep -A6 -i '^ *Fabric' | head -n 40
fi
exit "$rc"
