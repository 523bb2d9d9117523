{{/* Labels on every object of the prerequisites release. */}}
{{- define "cdplane-prerequisites.labels" -}}
app.kubernetes.io/name: cdplane-prerequisites
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: cdplane
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The administrator groups as a CEL list literal (JSON strings are CEL strings). */}}
{{- define "cdplane-prerequisites.adminGroups" -}}
{{ toJson .Values.adminGroups }}
{{- end -}}

{{/*
cdplane-prerequisites.accountPlane: CEL expression, from (list $ "<component>" "<parts>"): the
plane id of the requesting user when it is exactly that component's service account of some
plane, and '<none>' otherwise. <parts> is a CEL expression holding the username split at ':'
(a policy variable, so that the split is made once). A plane's accounts live in its driver
namespace "<id>-cdplane" and are named "<id>-cdplane-<component>" (the legacy plane: namespace
"cdplane", "cdplane-<component>"). Both parts must name the same id: an account of that name in
another namespace, or another account in a driver namespace, is no plane's.
*/}}
{{- define "cdplane-prerequisites.accountPlane" -}}
{{- $component := index . 1 -}}
{{- $p := index . 2 -}}
(size({{ $p }}) == 4 && {{ $p }}[0] == 'system' && {{ $p }}[1] == 'serviceaccount'
 ? ({{ $p }}[2] == 'cdplane' && {{ $p }}[3] == 'cdplane-{{ $component }}'
    ? ''
    : ({{ $p }}[2].endsWith('-cdplane') && size({{ $p }}[2]) > size('-cdplane') &&
       {{ $p }}[3] == {{ $p }}[2] + '-{{ $component }}'
       ? {{ $p }}[2].substring(0, size({{ $p }}[2]) - size('-cdplane'))
       : '<none>'))
 : '<none>')
{{- end -}}
