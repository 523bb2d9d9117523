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
cdplane-prerequisites.accountPlane: CEL expression, from (list $ "<component>"): the plane id of
the requesting user when it is exactly that component's service account of some plane — a
plane's accounts live in its driver namespace "<id>-cdplane" and are named
"<id>-cdplane-<component>" (the legacy plane: namespace "cdplane", "cdplane-<component>") —
and '<none>' otherwise. Both parts must name the same id: an account of that name in another
namespace, or another account in a driver namespace, is no plane's.
*/}}
{{- define "cdplane-prerequisites.accountPlane" -}}
{{- $component := index . 1 -}}
(request.userInfo.username.startsWith('system:serviceaccount:') &&
 size(request.userInfo.username.split(':')) == 4
 ? (request.userInfo.username.split(':')[2] == 'cdplane' &&
    request.userInfo.username.split(':')[3] == 'cdplane-{{ $component }}'
    ? ''
    : (request.userInfo.username.split(':')[2].endsWith('-cdplane') &&
       size(request.userInfo.username.split(':')[2]) > size('-cdplane') &&
       request.userInfo.username.split(':')[3] == request.userInfo.username.split(':')[2] + '-{{ $component }}'
       ? request.userInfo.username.split(':')[2].substring(0, size(request.userInfo.username.split(':')[2]) - size('-cdplane'))
       : '<none>'))
 : '<none>')
{{- end -}}
