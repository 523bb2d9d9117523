#!/usr/bin/env bash
# Builds kubectl from its Go module (hack/tools/kubectl, k8s.io/kubectl at the control plane's
# version) into the cache, keyed by version, for the simulated cluster (`cdplane sim up` puts it on the PATH it
# prints). Does nothing when it is already there. The last line printed is the directory.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools="${here}/tools/kubectl"
k8s_version="v$(cd "${tools}" && go list -m -f '{{.Version}}' k8s.io/kubectl | sed 's/^v0\./1./')"
go_version="$(go env GOVERSION)"
sum_key="$(cat "${tools}/go.mod" "${tools}/go.sum" "${tools}/main.go" "$0" | sha256sum | cut -c1-12)"
cache_root="${CDPLANE_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/cdplane}"
dir="${cache_root}/kubectl/${k8s_version}-${go_version}-${sum_key}"

if [[ -x "${dir}/kubectl" && -f "${dir}/.complete" ]]; then
  echo "${dir}"
  exit 0
fi
echo ">> building kubectl ${k8s_version} into ${dir} (a few minutes the first time)" >&2
mkdir -p "${dir}"
tmp="$(mktemp -d "${dir}/.build.XXXXXX")"
trap 'rm -rf "${tmp}"' EXIT
major="${k8s_version#v}"; major="${major%%.*}"
minor="${k8s_version#v*.}"; minor="${minor%%.*}"
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X ${pkg}.gitVersion=${k8s_version} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean"
done
cd "${tools}"
CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" go build -trimpath -ldflags "-s -w ${ldflags}" -o "${tmp}/kubectl" .
mv -f "${tmp}/kubectl" "${dir}/kubectl"
touch "${dir}/.complete"
echo "${dir}"
