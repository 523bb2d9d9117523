{{/* Labels on every object of the prerequisites release. */}}
{{- define "cdplane-prerequisites.labels" -}}
app.kubernetes.io/name: cdplane-prerequisites
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: cdplane
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}
