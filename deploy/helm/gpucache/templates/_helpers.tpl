{{/* Names and labels. */}}
{{- define "gpucache.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpucache.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "gpucache.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "gpucache.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpucache.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpucache.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpucache.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "gpucache.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The workload kind, checked. */}}
{{- define "gpucache.workload" -}}
{{- $w := .Values.workload -}}
{{- if not (has $w (list "daemonset" "statefulset")) -}}
{{- fail (printf "workload %q: want daemonset (a cache per host) or statefulset (a shared pool)" $w) -}}
{{- end -}}
{{- $w -}}
{{- end -}}

{{/*
gpucache.bytes: a size as gpucached writes it (64KiB, 4GiB, 1TiB, 4096)
or as Kubernetes does (512Mi, 4Gi), in bytes. Decimal units (GB) are
refused: the chart's sizing works in binary units.
*/}}
{{- define "gpucache.bytes" -}}
{{- $s := toString .v | trim -}}
{{- $m := regexFindAll "^([0-9]+)(TiB|GiB|MiB|KiB|Ti|Gi|Mi|Ki|T|G|M|K)?$" $s -1 -}}
{{- if not $m -}}
{{- fail (printf "%s %q: want a whole number with a binary unit (e.g. 64GiB, 512MiB, 3584Mi)" .name $s) -}}
{{- end -}}
{{- $n := regexFind "^[0-9]+" $s | int64 -}}
{{- $u := trimPrefix (regexFind "^[0-9]+" $s) $s -}}
{{- $mult := 1 -}}
{{- if hasPrefix "T" $u -}}{{- $mult = 1099511627776 -}}
{{- else if hasPrefix "G" $u -}}{{- $mult = 1073741824 -}}
{{- else if hasPrefix "M" $u -}}{{- $mult = 1048576 -}}
{{- else if hasPrefix "K" $u -}}{{- $mult = 1024 -}}
{{- end -}}
{{- mul $n $mult -}}
{{- end -}}

{{/*
gpucache.memoryMi: the pod's memory request and limit in MiB (rounded up):
  hot_capacity + hot_capacity × 256 B / hot_min_class + resources.memoryOverhead
with any hot_policy but builtin (the default is adaptive)
  + hot_capacity × 1060 B / hot_min_class
(the policy's state, 530 B a slot, doubled by the Go GC's headroom;
OPERATIONS "Memory bound", M_policy), and with the flash tier
  + flash.capacity × 200 B / hot_min_class + 2 × flash_write_buffer
(the flash index at about 200 B a block when every block is of the
smallest class, ADR 0027; its write buffer on the Go heap).
*/}}
{{- define "gpucache.memoryMi" -}}
{{- $hot := include "gpucache.bytes" (dict "name" "config.hot_capacity" "v" (default "1GiB" .Values.config.hot_capacity)) | int64 -}}
{{- $min := include "gpucache.bytes" (dict "name" "config.hot_min_class" "v" (default "16KiB" .Values.config.hot_min_class)) | int64 -}}
{{- $over := include "gpucache.bytes" (dict "name" "resources.memoryOverhead" "v" .Values.resources.memoryOverhead) | int64 -}}
{{- $total := add $hot (div (mul $hot 256) $min) $over -}}
{{- if ne (default "adaptive" .Values.config.hot_policy) "builtin" -}}
{{- $total = add $total (div (mul $hot 1060) $min) -}}
{{- end -}}
{{- if .Values.flash.enabled -}}
{{- $fcap := include "gpucache.bytes" (dict "name" "flash.capacity" "v" .Values.flash.capacity) | int64 -}}
{{- $fbuf := include "gpucache.bytes" (dict "name" "config.flash_write_buffer" "v" (default "64MiB" .Values.config.flash_write_buffer)) | int64 -}}
{{- $total = add $total (div (mul $fcap 200) $min) (mul $fbuf 2) -}}
{{- end -}}
{{- div (add $total 1048575) 1048576 -}}
{{- end -}}

{{/* Secret names. */}}
{{- define "gpucache.tenantSecret" -}}
{{- default (printf "%s-tenants" (include "gpucache.fullname" .)) .Values.tenants.existingSecret -}}
{{- end -}}
{{- define "gpucache.tlsSecret" -}}
{{- default (printf "%s-tls" (include "gpucache.fullname" .)) .Values.tls.existingSecret -}}
{{- end -}}
{{- define "gpucache.sealSecret" -}}
{{- default (printf "%s-seal" (include "gpucache.fullname" .)) .Values.sealKeys.existingSecret -}}
{{- end -}}
{{- define "gpucache.coldKeySecret" -}}
{{- default (printf "%s-coldkeys" (include "gpucache.fullname" .)) .Values.coldEncryptionKeys.existingSecret -}}
{{- end -}}

{{/* gpucache.tenantKeys: the key of every tenant secret, <tenant>.<id>, one a line. */}}
{{- define "gpucache.tenantKeys" -}}
{{- if not .Values.tenants.list -}}
{{- fail "tenants.list is empty: gpucached listens beyond loopback only with tenants (authentication); define at least one" -}}
{{- end -}}
{{- range .Values.tenants.list -}}
{{- $t := . -}}
{{- if not (regexMatch "^[-._a-zA-Z0-9]+$" (toString $t.name)) -}}
{{- fail (printf "tenant %q: the chart keeps its secrets under the Secret key <name>.<id>; use a name of letters, digits, '-', '_' and '.'" (toString $t.name)) -}}
{{- end -}}
{{- if not $t.secrets -}}
{{- fail (printf "tenant %q has no secrets: give it secrets: [{id: s1}] (its secret is then the Secret key %s.s1)" $t.name $t.name) -}}
{{- end -}}
{{- range $t.secrets -}}
{{- if or .file .env -}}
{{- fail (printf "tenant %q secret %q: give only its id (and not_after); the chart mounts every secret from a Secret as /etc/gpucache/secrets/<name>.<id>" $t.name (toString .id)) -}}
{{- end -}}
{{- if not (regexMatch "^[-._a-zA-Z0-9]+$" (toString .id)) -}}
{{- fail (printf "tenant %q secret id %q: use letters, digits, '-', '_' and '.'" $t.name (toString .id)) -}}
{{- end -}}
{{ printf "%s.%s" $t.name .id }}
{{ end -}}
{{- end -}}
{{- end -}}
