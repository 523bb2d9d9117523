#!/usr/bin/env bash
# Builds the test control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
# from their Go modules into a cache directory outside the repository, keyed by version.
# Does nothing when the binaries are already there. The last line printed is the directory.
#
# Usage: hack/k8s-bins.sh [KUBERNETES_VERSION]
#   KUBERNETES_VERSION  the Kubernetes release to build, as v1.MINOR or v1.MINOR.PATCH (default:
#                       the newest supported, hack/tools/k8s). Each supported minor has its own
#                       tool module (hack/tools/k8s-v1.MINOR) that pins the patch release and the
#                       etcd version that release pins; a patch release other than the pinned one
#                       is refused, naming the one that is built.
#
# Environment:
#   CDPLANE_K8S_VERSION  used when no argument is given
#   CDPLANE_CACHE_DIR  root of the cache (default: ${XDG_CACHE_HOME:-$HOME/.cache}/cdplane)
#   K8S_BINS_JOBS      parallel compile jobs (default: number of CPUs)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
want="${1:-${CDPLANE_K8S_VERSION:-}}"
tools="${here}/tools/k8s"
if [[ -n "${want}" ]]; then
  if [[ ! "${want}" =~ ^v?1\.([0-9]+)(\.[0-9]+)?$ ]]; then
    echo "k8s-bins: Kubernetes version \"${want}\" is not of the form v1.MINOR or v1.MINOR.PATCH" >&2
    exit 2
  fi
  want="v${want#v}"
  minor_dir="${here}/tools/k8s-v1.${BASH_REMATCH[1]}"
  default_version="$(cd "${tools}" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
  if [[ -d "${minor_dir}" ]]; then
    tools="${minor_dir}"
  elif [[ "${default_version}" != "v1.${BASH_REMATCH[1]}."* ]]; then
    supported="${default_version}"
    for d in "${here}"/tools/k8s-v1.*; do
      [[ -d "${d}" ]] && supported+=", $(cd "${d}" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
    done
    echo "k8s-bins: Kubernetes ${want} is outside the supported range; supported: ${supported}" >&2
    exit 2
  fi
fi

k8s_version="$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' <(cd "${tools}" && go list -m -f '{{.Path}} {{.Version}}' k8s.io/kubernetes))"
etcd_version="$(cd "${tools}" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
if [[ -n "${want}" && "${want}" =~ ^v1\.[0-9]+\.[0-9]+$ && "${want}" != "${k8s_version}" ]]; then
  echo "k8s-bins: Kubernetes ${want} is not the pinned patch release of its minor; use ${k8s_version}" >&2
  exit 2
fi
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
# sed reads all of etcd's lines: with head, etcd could still be writing its second line when head
# exited, die of SIGPIPE, and fail the build under pipefail (seen on a cold build here).
"${dir}/etcd" --version | sed -n 1p >&2
touch "${dir}/.complete"
echo ">> built in $(( $(date +%s) - start ))s" >&2
echo "${dir}"
