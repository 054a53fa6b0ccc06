{{/*
The name of every object: the release's name, with the chart's name added
unless the release's name holds it already ("notification-worker" stays
"notification-worker"; "eu" becomes "eu-notification-worker").
*/}}
{{- define "notification-worker.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
The labels that select the release's pods. The instance label keeps two
releases in one namespace apart; name and component are the ones deploy/k8s
selects on.
*/}}
{{- define "notification-worker.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: worker
{{- end -}}

{{/* Every object's labels: the selector labels and Helm's own. */}}
{{- define "notification-worker.labels" -}}
{{ include "notification-worker.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
