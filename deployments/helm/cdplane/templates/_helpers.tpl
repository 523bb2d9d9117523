{{/*
cdplane.name: the name of a plane-specific object, from (list $ "<legacy name>"). Legacy plane
(empty id): the legacy name. Otherwise "<id>-<legacy>"; past 63 characters, its first 54
characters with trailing "-" trimmed, then "-" and the first 8 hex characters of the SHA-256 of
the full name. The same rule as plane.Name in internal/plane (a Go test compares them).
*/}}
{{- define "cdplane.name" -}}
{{- $id := (index . 0).Values.controlPlaneID -}}
{{- $legacy := index . 1 -}}
{{- if not $id -}}
{{- $legacy -}}
{{- else -}}
{{- $full := printf "%s-%s" $id $legacy -}}
{{- if le (len $full) 63 -}}
{{- $full -}}
{{- else -}}
{{- printf "%s-%s" (regexReplaceAll "-+$" (substr 0 54 $full) "") (sha256sum $full | trunc 8) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* cdplane.validate fails the render on an invalid control-plane id (the schema says the same). */}}
{{- define "cdplane.validate" -}}
{{- if not .Values.image.repository -}}
{{- fail "image.repository is not set: set it to the registry and repository the cdplane image was pushed to, e.g. --set image.repository=registry.example.com/cdplane (docs/installing.md, \"Image\")" -}}
{{- end -}}
{{- $id := .Values.controlPlaneID -}}
{{- if $id -}}
{{- if gt (len $id) 20 -}}
{{- fail (printf "controlPlaneID %q: must be at most 20 characters, has %d" $id (len $id)) -}}
{{- end -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $id) -}}
{{- fail (printf "controlPlaneID %q: must be a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a letter or digit" $id) -}}
{{- end -}}
{{- if eq $id "default" -}}
{{- fail "controlPlaneID \"default\" is reserved" -}}
{{- end -}}
{{- end -}}
{{- $mode := .Values.imex.mode | default "driverManaged" -}}
{{- if and (eq $mode "hostManaged") (not (.Values.featureGates.HostManagedIMEXDaemon | default false)) -}}
{{- fail "imex.mode=hostManaged requires featureGates.HostManagedIMEXDaemon=true (an alpha feature)" -}}
{{- end -}}
{{- $driverNS := include "cdplane.name" (list . "cdplane") -}}
{{- if ne .Release.Namespace $driverNS -}}
{{- fail (printf "the release namespace must be the plane's driver namespace %q, not %q: the admission policies identify a plane's service accounts by it" $driverNS .Release.Namespace) -}}
{{- end -}}
{{- $known := splitList "," (include "cdplane.featureGateNames" .) -}}
{{- range $gate := keys .Values.featureGates | sortAlpha -}}
{{- if not (has $gate $known) -}}
{{- fail (printf "featureGates.%s: cdplane has no such gate (its gates: %s); NVIDIA's GPU-plugin gates belong to NVIDIA's chart" $gate (join ", " $known)) -}}
{{- end -}}
{{- end -}}
{{- if and (eq (toString .Values.controller.leaderElection.enabled) "false") (gt (int (include "cdplane.controllerReplicas" .)) 1) -}}
{{- fail (printf "controller.leaderElection.enabled=false with controller.replicas=%v: without leader election every replica reconciles; use one replica" .Values.controller.replicas) -}}
{{- end -}}
{{- if and .Values.controller.metrics.enabled (eq (include "cdplane.metricsPort" .) "8081") -}}
{{- fail (printf "controller.metrics.httpEndpoint %q: port 8081 is the controller's health probes'" .Values.controller.metrics.httpEndpoint) -}}
{{- end -}}
{{- include "cdplane.validateNVIDIAValues" . -}}
{{- end -}}

{{/*
cdplane.featureGateNames: every gate the components accept, comma-separated: cdplane's
(internal/features) and component-base's logging gates. A Go test compares it with
features.NewGates().
*/}}
{{- define "cdplane.featureGateNames" -}}
AllAlpha,AllBeta,ComputeDomainCliques,ContextualLogging,CrashOnNVLinkFabricErrors,HostManagedIMEXDaemon,IMEXDaemonsWithDNSNames,LoggingAlphaOptions,LoggingBetaOptions
{{- end -}}

{{/*
cdplane.validateNVIDIAValues fails the render on a value of NVIDIA's chart that cdplane has
under another name, or cannot honour, where ignoring it would change what the cluster gets (a
resource limit, the IMEX mode, a host path). NVIDIA's defaults pass. The mapping of every value
is in docs/installing.md ("From NVIDIA's chart values").
*/}}
{{- define "cdplane.validateNVIDIAValues" -}}
{{- $v := .Values -}}
{{- range $k := list "nameOverride" "fullnameOverride" "namespaceOverride" -}}
{{- if index $v $k -}}
{{- fail (printf "%s (NVIDIA's chart) is not supported: a plane's names and namespace derive from controlPlaneID" $k) -}}
{{- end -}}
{{- end -}}
{{- if $v.serviceAccount.name -}}
{{- fail "serviceAccount.name (NVIDIA's chart) is not supported: the plane's three service accounts have names derived from controlPlaneID, which its RBAC bindings, FlowSchema and admission policies name" -}}
{{- end -}}
{{- $cd := dig "resources" "computeDomains" dict $v.AsMap -}}
{{- if eq (toString (dig "enabled" true $cd)) "false" -}}
{{- fail "resources.computeDomains.enabled=false (NVIDIA's chart): this chart runs ComputeDomains only; do not install it" -}}
{{- end -}}
{{- $imex := dig "imex" dict $cd -}}
{{- with dig "mode" "" $imex -}}
{{- if ne (toString .) ($v.imex.mode | default "driverManaged") -}}
{{- fail (printf "resources.computeDomains.imex.mode=%v (NVIDIA's chart) differs from imex.mode=%v: set imex.mode" . ($v.imex.mode | default "driverManaged")) -}}
{{- end -}}
{{- end -}}
{{- with dig "hostSocketPath" "" $imex -}}
{{- if ne (toString .) $v.imex.hostSocketPath -}}
{{- fail (printf "resources.computeDomains.imex.hostSocketPath=%v (NVIDIA's chart) differs from imex.hostSocketPath=%v: set imex.hostSocketPath" . $v.imex.hostSocketPath) -}}
{{- end -}}
{{- end -}}
{{- with dig "isolation" "" $imex -}}
{{- if ne (toString .) "domain" -}}
{{- fail (printf "resources.computeDomains.imex.isolation=%v (NVIDIA's chart): cdplane, like NVIDIA's driver, has only domain isolation (one channel per ComputeDomain)" .) -}}
{{- end -}}
{{- end -}}
{{- $ctl := dig "containers" "computeDomain" dict $v.controller -}}
{{- range $k := list "resources" "securityContext" -}}
{{- if index $ctl $k -}}
{{- fail (printf "controller.containers.computeDomain.%s (NVIDIA's chart): set controller.%s (the controller's pod has one container)" $k $k) -}}
{{- end -}}
{{- end -}}
{{- if dig "env" list $ctl -}}
{{- fail "controller.containers.computeDomain.env (NVIDIA's chart): cdplane's controller takes its settings from this chart's values, not from its environment" -}}
{{- end -}}
{{- $plug := dig "containers" "computeDomains" dict $v.kubeletPlugin -}}
{{- if dig "resources" dict $plug -}}
{{- fail "kubeletPlugin.containers.computeDomains.resources (NVIDIA's chart): set kubeletPlugin.resources (the plugin's pod has one container)" -}}
{{- end -}}
{{- with dig "securityContext" dict $plug -}}
{{- if ne (toJson .) (toJson (dict "privileged" true)) -}}
{{- fail "kubeletPlugin.containers.computeDomains.securityContext (NVIDIA's chart): set kubeletPlugin.securityContext (the plugin's pod has one container)" -}}
{{- end -}}
{{- end -}}
{{- if dig "env" list $plug -}}
{{- fail "kubeletPlugin.containers.computeDomains.env (NVIDIA's chart): cdplane's kubelet plugin takes its settings from this chart's values, not from its environment" -}}
{{- end -}}
{{- if and (dig "gpuCliqueLabelEnabled" false $plug) (not $v.kubeletPlugin.nodeCliqueLabel) -}}
{{- fail "kubeletPlugin.containers.computeDomains.gpuCliqueLabelEnabled (NVIDIA's chart): set kubeletPlugin.nodeCliqueLabel" -}}
{{- end -}}
{{- range $k, $dir := dict "kubeletRegistrarDirectoryPath" "plugins_registry" "kubeletPluginsDirectoryPath" "plugins" -}}
{{- with index $v.kubeletPlugin $k -}}
{{- $want := printf "%s/%s" (trimSuffix "/" $v.kubeletPlugin.kubeletDir) $dir -}}
{{- if ne (trimSuffix "/" (toString .)) $want -}}
{{- fail (printf "kubeletPlugin.%s=%v (NVIDIA's chart) differs from %s: set kubeletPlugin.kubeletDir, the kubelet directory holding plugins_registry and plugins" $k . $want) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $c := list "controller" "kubeletPlugin" -}}
{{- if dig "networkPolicy" "enabled" false (index $v $c) -}}
{{- fail (printf "%s.networkPolicy.enabled (NVIDIA's chart): this chart ships no NetworkPolicy" $c) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* cdplane.metricsPort: the port of controller.metrics.httpEndpoint. */}}
{{- define "cdplane.metricsPort" -}}
{{- regexFind "[0-9]+$" .Values.controller.metrics.httpEndpoint -}}
{{- end -}}

{{/* cdplane.daemonLogVerbosity: daemon.logVerbosity, or logVerbosity when it is unset. */}}
{{- define "cdplane.daemonLogVerbosity" -}}
{{- $d := .Values.daemon.logVerbosity -}}
{{- if kindIs "invalid" $d -}}{{ .Values.logVerbosity }}{{- else -}}{{ $d }}{{- end -}}
{{- end -}}

{{/* cdplane.imagePullSecrets: the pod spec's imagePullSecrets, when there are any. */}}
{{- define "cdplane.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets -}}
imagePullSecrets:
{{ toYaml . | indent 2 }}
{{- end -}}
{{- end -}}

{{/* cdplane.labels: labels on every object, from (list $ "<component>"). */}}
{{- define "cdplane.labels" -}}
{{- $ := index . 0 -}}
{{ include "cdplane.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ $.Release.Service }}
app.kubernetes.io/part-of: cdplane
app.kubernetes.io/version: {{ $.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" $.Chart.Name $.Chart.Version | replace "+" "_" }}
{{- with $.Values.controlPlaneID }}
resource.nvidia.com/control-plane-id: {{ . }}
{{- end }}
{{- end -}}

{{/* cdplane.selectorLabels: the stable labels selecting a component's pods. */}}
{{- define "cdplane.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ index . 1 }}
app.kubernetes.io/instance: {{ $.Release.Name }}
{{- end -}}

{{- define "cdplane.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* cdplane.featureGates: the --feature-gates value, gates sorted by name. */}}
{{- define "cdplane.featureGates" -}}
{{- $gates := list -}}
{{- range $k := keys .Values.featureGates | sortAlpha -}}
{{- $gates = append $gates (printf "%s=%t" $k (index $.Values.featureGates $k)) -}}
{{- end -}}
{{- join "," $gates -}}
{{- end -}}

{{/* cdplane.hostManaged: "true" when the administrator runs IMEX as a host service. */}}
{{- define "cdplane.hostManaged" -}}
{{- if eq (.Values.imex.mode | default "driverManaged") "hostManaged" }}true{{ end -}}
{{- end -}}

{{/* cdplane.planeArgs: the control-plane id argument, only for a plane with an id. */}}
{{- define "cdplane.planeArgs" -}}
{{- with .Values.controlPlaneID }}
- --control-plane-id={{ . }}
{{- end }}
{{- with include "cdplane.featureGates" . }}
- --feature-gates={{ . }}
{{- end }}
{{- end -}}

{{/* cdplane.controllerReplicas: controller.replicas, or when unset (null) 2 with leader election
and 1 without. */}}
{{- define "cdplane.controllerReplicas" -}}
{{- if kindIs "invalid" .Values.controller.replicas -}}
{{- if eq (toString .Values.controller.leaderElection.enabled) "false" }}1{{ else }}2{{ end -}}
{{- else -}}
{{- int .Values.controller.replicas -}}
{{- end -}}
{{- end -}}

{{/*
cdplane.selectorCEL: a Kubernetes label selector string, rendered as a CEL expression over a
label map, from (list "<selector>" "<CEL label map>"), with the same meaning as the Go parser
gives it (labels.Parse): k=v and k==v (present and equal), k!=v (absent or different),
k in (a,b) (present and one of them), k notin (a,b) (absent or none of them), k (present),
!k (absent); requirements are ANDed. The empty selector selects nothing here: the mirror's
legacy namespace selector must be set to mirror at all. Anything else (k>1, k<1) fails the
render, naming the requirement: the admission policy must never say less than the selector.
*/}}
{{- define "cdplane.selectorCEL" -}}
{{- $sel := index . 0 -}}
{{- $m := index . 1 -}}
{{- $out := list -}}
{{- $word := "[-A-Za-z0-9_./]+" -}}
{{- range $r := regexFindAll "[^,(]+(\\([^)]*\\))?" $sel -1 -}}
{{- $r = trim $r -}}
{{- if regexMatch (printf "^%s\\s+(in|notin)\\s*\\(\\s*%s(\\s*,\\s*%s)*\\s*\\)$" $word $word $word) $r -}}
{{- $key := regexReplaceAll "^(\\S+)\\s.*$" $r "${1}" -}}
{{- $op := regexReplaceAll "^\\S+\\s+(in|notin)\\s*\\(.*$" $r "${1}" -}}
{{- $vals := list -}}
{{- range $v := splitList "," (regexReplaceAll "^[^(]*\\(([^)]*)\\)$" $r "${1}") -}}
{{- $vals = append $vals (printf "'%s'" (trim $v)) -}}
{{- end -}}
{{- if eq $op "in" -}}
{{- $out = append $out (printf "(%s[?'%s'].orValue('<none>') in [%s])" $m $key (join ", " $vals)) -}}
{{- else -}}
{{- $out = append $out (printf "!(%s[?'%s'].orValue('<none>') in [%s])" $m $key (join ", " $vals)) -}}
{{- end -}}
{{- else if regexMatch (printf "^%s\\s*!=\\s*[-A-Za-z0-9_.]*$" $word) $r -}}
{{- $kv := regexSplit "\\s*!=\\s*" $r 2 -}}
{{- $out = append $out (printf "(%s[?'%s'].orValue('<none>') != '%s')" $m (index $kv 0) (index $kv 1)) -}}
{{- else if regexMatch (printf "^%s\\s*==?\\s*[-A-Za-z0-9_.]*$" $word) $r -}}
{{- $kv := regexSplit "\\s*==?\\s*" $r 2 -}}
{{- $out = append $out (printf "(%s[?'%s'].orValue('<none>') == '%s')" $m (index $kv 0) (index $kv 1)) -}}
{{- else if regexMatch (printf "^!\\s*%s$" $word) $r -}}
{{- $out = append $out (printf "!('%s' in %s)" (trimPrefix "!" $r | trim) $m) -}}
{{- else if regexMatch (printf "^%s$" $word) $r -}}
{{- $out = append $out (printf "('%s' in %s)" $r $m) -}}
{{- else -}}
{{- fail (printf "secretMirror.namespaceSelector: requirement %q cannot be enforced by the controller's admission policy; use =, ==, !=, in, notin, a key or !key" $r) -}}
{{- end -}}
{{- end -}}
{{- if $out -}}{{ join " && " $out }}{{- else -}}false{{- end -}}
{{- end -}}
