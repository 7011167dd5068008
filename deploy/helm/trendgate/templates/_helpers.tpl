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
{{- $_ := set $server "shutdown_delay" (printf "%ds" (int .Values.shutdown.delaySeconds)) -}}
{{- $_ := set $server "shutdown_timeout" (printf "%ds" (int .Values.shutdown.timeoutSeconds)) -}}
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
{{- $dir := .Values.persistence.mountPath -}}
{{- $state := get $cfg "state" | default dict -}}
{{- if not (get $state "path") -}}
{{- $_ := set $state "path" (printf "%s/state" $dir) -}}
{{- end -}}
{{- $_ := set $cfg "state" $state -}}
{{- if not (get $cfg "keys_file") -}}
{{- $_ := set $cfg "keys_file" (printf "%s/keys.json" $dir) -}}
{{- end -}}
{{- $cache := get $cfg "cache" | default dict -}}
{{- if not (get $cache "persist_path") -}}
{{- $_ := set $cache "persist_path" (printf "%s/cache.snapshot" $dir) -}}
{{- end -}}
{{- $_ := set $cfg "cache" $cache -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/*
Seconds from SIGTERM to SIGKILL: the delay, the drain and the last writes
(values.shutdown).
*/}}
{{- define "trendgate.gracePeriod" -}}
{{- with .Values.shutdown -}}
{{- add (int .delaySeconds) (int .timeoutSeconds) (int .persistSeconds) -}}
{{- end -}}
{{- end -}}

{{/*
The combinations the chart refuses, each with the reason.
*/}}
{{- define "trendgate.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.clusterMode) -}}
{{- fail "replicaCount > 1 needs clusterMode: true (and secrets.redisURL): without Redis every instance enforces each key's full limits and quotas on its own, and keeps quotas of its own" -}}
{{- end -}}
{{- if and .Values.autoscaling.enabled (not .Values.clusterMode) -}}
{{- fail "autoscaling.enabled needs clusterMode: true (and secrets.redisURL): more than one instance without Redis multiplies every key's limits and quotas" -}}
{{- end -}}
{{- if lt (int .Values.shutdown.delaySeconds) 0 -}}
{{- fail "shutdown.delaySeconds must be 0 or more" -}}
{{- end -}}
{{- if lt (int .Values.shutdown.timeoutSeconds) 1 -}}
{{- fail "shutdown.timeoutSeconds must be at least 1 (server.shutdown_timeout)" -}}
{{- end -}}
{{- end -}}

{{/*
Memory in bytes from the sizing rule of docs/operations.md: 1.25 x cache.max_bytes + 48 MiB
+ 1 KiB per key listed in config.keys (keys made through the key API are not counted here).
*/}}
{{- define "trendgate.memory" -}}
{{- $max := 268435456 -}}
{{- with .Values.config.cache -}}{{- with .max_bytes -}}{{- $max = int64 . -}}{{- end -}}{{- end -}}
{{- add $max (div $max 4) 50331648 (mul (len (.Values.config.keys | default list)) 1024) -}}
{{- end -}}
