{{/* The name of every object of a release. */}}
{{- define "trendgate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select a release's pods. */}}
{{- define "trendgate.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "trendgate.labels" -}}
{{ include "trendgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "trendgate.secretName" -}}
{{- .Values.existingSecret | default (include "trendgate.fullname" .) -}}
{{- end -}}

{{/*
The configuration file: values.config with the settings the chart owns
(listeners on every interface of the pod, credentials from the Secret's
environment variables) laid over it.
*/}}
{{- define "trendgate.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $server := get $cfg "server" | default dict -}}
{{- $_ := set $server "listen" (printf ":%d" (int .Values.ports.http)) -}}
{{- $_ := set $cfg "server" $server -}}
{{- $admin := get $cfg "admin" | default dict -}}
{{- $_ := set $admin "listen" (printf ":%d" (int .Values.ports.admin)) -}}
{{- $_ := set $admin "token" "${TRENDGATE_ADMIN_TOKEN}" -}}
{{- $_ := set $cfg "admin" $admin -}}
{{- $upstream := get $cfg "upstream" | default dict -}}
{{- $_ := set $upstream "api_key" "${TRENDGATE_UPSTREAM_KEY}" -}}
{{- $_ := set $cfg "upstream" $upstream -}}
{{- if .Values.clusterMode -}}
{{- $redis := get $cfg "redis" | default dict -}}
{{- $_ := set $redis "url" "${TRENDGATE_REDIS_URL}" -}}
{{- $_ := set $cfg "redis" $redis -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/*
Memory in bytes from the sizing rule of docs/operations.md: 1.25 x cache.max_bytes + 48 MiB.
*/}}
{{- define "trendgate.memory" -}}
{{- $max := 268435456 -}}
{{- with .Values.config.cache -}}{{- with .max_bytes -}}{{- $max = int64 . -}}{{- end -}}{{- end -}}
{{- add $max (div $max 4) 50331648 -}}
{{- end -}}
