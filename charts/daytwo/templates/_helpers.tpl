{{/* The operator's labels and selector, as config/manager has them. */}}
{{- define "daytwo.labels" -}}
app.kubernetes.io/name: daytwo
app.kubernetes.io/component: operator
{{- end }}

{{/* A file shared with config/ (hack/chart-sync.sh), in the release's namespace. */}}
{{- define "daytwo.file" -}}
{{- $root := index . 0 -}}
{{- $root.Files.Get (index . 1) | replace "namespace: daytwo-system" (printf "namespace: %s" $root.Release.Namespace) -}}
{{- end }}

{{/* The image, repository:tag. */}}
{{- define "daytwo.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end }}
