#!/usr/bin/env bash
# Fails when generated code or manifests, formatting, or go.mod/go.sum drift from the sources.
# Regenerates into a scratch copy of the repository so the working tree is never changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "${scratch}"' EXIT

tar -C "${root}" --exclude=./.git --exclude=./bin -cf - . | tar -C "${scratch}" -xf -
cd "${scratch}"
failed=0

make -s generate manifests >/dev/null
for d in api deployments/helm/cdplane-prerequisites/templates/crds; do
  if ! diff -ruN "${root}/${d}" "${scratch}/${d}"; then
    echo "verify: ${d}/ is out of date; run 'make generate manifests' and commit the result" >&2
    failed=1
  fi
done
go run ./hack/benchindex -check || failed=1
go run ./hack/valuesdoc -check || failed=1

unformatted="$(gofmt -l $(git -C "${root}" ls-files -co --exclude-standard '*.go' | sed "s|^|${root}/|"))"
if [[ -n "${unformatted}" ]]; then
  echo "verify: gofmt would change:" >&2
  echo "${unformatted}" >&2
  failed=1
fi

for mod in . hack/tools/k8s hack/tools/k8s-v1.34 hack/tools/lint hack/tools/kubectl; do
  (cd "${scratch}/${mod}" && go mod tidy >/dev/null 2>&1)
  if ! diff -u "${root}/${mod}/go.mod" "${scratch}/${mod}/go.mod" || ! diff -q "${root}/${mod}/go.sum" "${scratch}/${mod}/go.sum" >/dev/null; then
    echo "verify: ${mod}/go.mod or go.sum is not tidy; run 'go mod tidy' there" >&2
    failed=1
  fi
done

if [[ "${failed}" != 0 ]]; then exit 1; fi
echo "verify: generated code, manifests, formatting and go.mod are up to date"
