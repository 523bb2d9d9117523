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
