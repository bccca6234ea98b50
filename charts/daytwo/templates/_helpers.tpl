{{/* The prefix of every name the chart gives: the release's name when it
holds the chart's, else release-chart (fullnameOverride replaces it). A
release named daytwo gives config/default's names. */}}
{{- define "daytwo.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The operator's ServiceAccount. */}}
{{- define "daytwo.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (printf "%s-operator" (include "daytwo.fullname" .)) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: set it when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The operator's labels and selector, as config/manager has them
(a Deployment's selector cannot change once made). Two releases in one
namespace would share them: install one per namespace. */}}
{{- define "daytwo.labels" -}}
app.kubernetes.io/name: daytwo
app.kubernetes.io/component: operator
{{- end }}

{{/* A file shared with config/ (hack/chart-sync.sh), in the release's
namespace, with the release's names for config/'s daytwo- names and the
operator's ServiceAccount. */}}
{{- define "daytwo.file" -}}
{{- $root := index . 0 -}}
{{- $out := $root.Files.Get (index . 1) | replace "namespace: daytwo-system" (printf "namespace: %s" $root.Release.Namespace) -}}
{{- $fullname := include "daytwo.fullname" $root -}}
{{- if ne $fullname "daytwo" -}}
{{- $out = $out | replace "name: daytwo-" (printf "name: %s-" $fullname) | replace "- daytwo-validating-webhook" (printf "- %s-validating-webhook" $fullname) -}}
{{- end -}}
{{- $out = $out | replace (printf "name: %s-operator\n    namespace:" $fullname) (printf "name: %s\n    namespace:" (include "daytwo.serviceAccountName" $root)) -}}
{{- $out -}}
{{- end }}

{{/* The image, repository:tag; the tag defaults to the chart's appVersion. */}}
{{- define "daytwo.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end }}
