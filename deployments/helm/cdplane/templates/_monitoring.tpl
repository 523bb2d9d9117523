{{/*
cdplane.planeMatcher: the PromQL matcher of the plane's series, control_plane_id="<id>" (the
legacy plane: control_plane_id="", which matches series without the label, as Prometheus stores
an empty label).
*/}}
{{- define "cdplane.planeMatcher" -}}
control_plane_id={{ .Values.controlPlaneID | quote }}
{{- end -}}

{{/*
cdplane.targetMatcher: the matchers of the plane's scrape targets of a component, from
(list $ "<component>"): the job the PodMonitor gives them, the driver namespace and the plane.
*/}}
{{- define "cdplane.targetMatcher" -}}
{{- $ := index . 0 -}}
job={{ index . 1 | quote }}, namespace={{ $.Release.Namespace | quote }}, {{ include "cdplane.planeMatcher" $ }}
{{- end -}}

{{/* cdplane.seconds: a duration of one unit (30s, 15m, 1h; the schema allows no other) in seconds. */}}
{{- define "cdplane.seconds" -}}
{{- $n := regexFind "^[0-9]+" . | int -}}
{{- $unit := regexFind "[a-z]+$" . -}}
{{- if eq $unit "s" -}}{{ $n }}
{{- else if eq $unit "m" -}}{{ mul $n 60 }}
{{- else if eq $unit "h" -}}{{ mul $n 3600 }}
{{- else -}}{{ fail (printf "duration %q: want a number of seconds, minutes or hours (30s, 15m, 1h)" .) }}
{{- end -}}
{{- end -}}
