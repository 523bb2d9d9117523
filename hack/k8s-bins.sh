#!/usr/bin/env bash
# Builds the test control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
# from their Go modules into a cache directory outside the repository, keyed by version.
# Does nothing when the binaries are already there. The last line printed is the directory.
#
# Environment:
#   CDPLANE_CACHE_DIR  root of the cache (default: ${XDG_CACHE_HOME:-$HOME/.cache}/cdplane)
#   K8S_BINS_JOBS      parallel compile jobs (default: number of CPUs)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools="${here}/tools/k8s"

k8s_version="$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' <(cd "${tools}" && go list -m -f '{{.Path}} {{.Version}}' k8s.io/kubernetes))"
etcd_version="$(cd "${tools}" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
go_version="$(go env GOVERSION)"
# The key covers the versions and the exact dependency set, so a change to the tools module
# never reuses stale binaries.
sum_key="$(cat "${tools}/go.mod" "${tools}/go.sum" "${tools}/etcd/main.go" "$0" | sha256sum | cut -c1-12)"

cache_root="${CDPLANE_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/cdplane}"
dir="${cache_root}/k8s-bins/${k8s_version}-etcd${etcd_version}-${go_version}-${sum_key}"
bins=(etcd kube-apiserver kube-controller-manager kube-scheduler)

complete() {
  [[ -f "${dir}/.complete" ]] || return 1
  for b in "${bins[@]}"; do [[ -x "${dir}/${b}" ]] || return 1; done
}

if complete; then
  echo "${dir}"
  exit 0
fi

echo ">> building Kubernetes ${k8s_version} control plane and etcd ${etcd_version} with ${go_version}" >&2
echo ">> into ${dir} (first build takes 10-15 minutes on 2 cores; later runs reuse it)" >&2
mkdir -p "${dir}"
tmp="$(mktemp -d "${dir}/.build.XXXXXX")"
trap 'rm -rf "${tmp}"' EXIT

major="${k8s_version#v}"; major="${major%%.*}"
minor="${k8s_version#v*.}"; minor="${minor%%.*}"
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X ${pkg}.gitVersion=${k8s_version}"
  ldflags+=" -X ${pkg}.gitMajor=${major}"
  ldflags+=" -X ${pkg}.gitMinor=${minor}"
  ldflags+=" -X ${pkg}.gitTreeState=clean"
  ldflags+=" -X ${pkg}.buildDate=${build_date}"
done

jobs="${K8S_BINS_JOBS:-$(nproc)}"
cd "${tools}"
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly"
start=$(date +%s)
for b in kube-apiserver kube-controller-manager kube-scheduler; do
  echo ">> go build ${b}" >&2
  go build -p "${jobs}" -trimpath -ldflags "-s -w ${ldflags}" -o "${tmp}/${b}" "k8s.io/kubernetes/cmd/${b}"
done
echo ">> go build etcd" >&2
go build -p "${jobs}" -trimpath -ldflags "-s -w" -o "${tmp}/etcd" ./etcd

for b in "${bins[@]}"; do mv -f "${tmp}/${b}" "${dir}/${b}"; done
"${dir}/kube-apiserver" --version >&2
"${dir}/etcd" --version | head -n1 >&2
touch "${dir}/.complete"
echo ">> built in $(( $(date +%s) - start ))s" >&2
echo "${dir}"
