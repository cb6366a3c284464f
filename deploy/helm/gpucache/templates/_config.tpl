{{/*
gpucache.config: the gpucached config file, from .Values.config plus the
settings the chart owns (listeners, secrets, cold store, cluster, flash).
Every secret is a file the pod mounts from a Secret, never a value here.
*/}}
{{- define "gpucache.config" -}}
{{- $v := .Values -}}
{{- $cfg := deepCopy (default dict $v.config) -}}
{{- $managed := list "listen" "admin_listen" "tenants" "tls_cert" "tls_key" "tls_client_ca" "seal_keys" "cold_encryption_keys" "cold_store" "cold_dir" "s3_endpoint" "s3_bucket" "s3_prefix" "s3_region" "s3_path_style" "s3_access_key" "s3_secret_key" "etcd_endpoints" "etcd_prefix" "etcd_ca" "etcd_cert" "etcd_key" "etcd_username" "etcd_password_file" "flash_dir" "flash_capacity" "node_id" "advertise_addr" "fault_domain" -}}
{{- range $k := $managed -}}
{{- if hasKey $cfg $k -}}
{{- fail (printf "config.%s is set by the chart: use its values instead (see values.yaml: ports, tenants, tls, sealKeys, coldEncryptionKeys, coldStore, s3, etcd, flash)" $k) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $cfg "listen" (printf "0.0.0.0:%d" (int $v.ports.data)) -}}
{{- $_ := set $cfg "admin_listen" (printf "0.0.0.0:%d" (int $v.ports.admin)) -}}
{{- /* tenants: secrets become files under /etc/gpucache/secrets */ -}}
{{- $ts := list -}}
{{- $_ := include "gpucache.tenantKeys" . -}}
{{- range $v.tenants.list -}}
{{- $t := deepCopy . -}}
{{- $secs := list -}}
{{- range $t.secrets -}}
{{- $s := dict "id" (toString .id) "file" (printf "/etc/gpucache/secrets/%s.%s" $t.name .id) -}}
{{- if .not_after -}}{{- $_ := set $s "not_after" .not_after -}}{{- end -}}
{{- $secs = append $secs $s -}}
{{- end -}}
{{- $_ := set $t "secrets" $secs -}}
{{- $ts = append $ts $t -}}
{{- end -}}
{{- if $ts -}}{{- $_ := set $cfg "tenants" $ts -}}{{- end -}}
{{- if $v.tls.enabled -}}
{{- $_ := set $cfg "tls_cert" "/etc/gpucache/tls/tls.crt" -}}
{{- $_ := set $cfg "tls_key" "/etc/gpucache/tls/tls.key" -}}
{{- if $v.tls.clientCA -}}{{- $_ := set $cfg "tls_client_ca" "/etc/gpucache/tls/ca.crt" -}}{{- end -}}
{{- end -}}
{{- if $v.sealKeys.ids -}}
{{- $ks := list -}}
{{- range $v.sealKeys.ids -}}{{- $ks = append $ks (dict "id" (toString .) "file" (printf "/etc/gpucache/seal/%s" .)) -}}{{- end -}}
{{- $_ := set $cfg "seal_keys" $ks -}}
{{- end -}}
{{- if $v.coldEncryptionKeys.ids -}}
{{- $ks := list -}}
{{- range $v.coldEncryptionKeys.ids -}}{{- $ks = append $ks (dict "id" (toString .) "file" (printf "/etc/gpucache/coldkeys/%s" .)) -}}{{- end -}}
{{- $_ := set $cfg "cold_encryption_keys" $ks -}}
{{- end -}}
{{- if eq (toString $v.coldStore) "s3" -}}
{{- if or (not $v.s3.endpoint) (not $v.s3.bucket) -}}
{{- fail "coldStore s3 needs s3.endpoint and s3.bucket" -}}
{{- end -}}
{{- $_ := set $cfg "cold_store" "s3" -}}
{{- $_ := set $cfg "s3_endpoint" $v.s3.endpoint -}}
{{- $_ := set $cfg "s3_bucket" $v.s3.bucket -}}
{{- if $v.s3.prefix -}}{{- $_ := set $cfg "s3_prefix" $v.s3.prefix -}}{{- end -}}
{{- $_ := set $cfg "s3_region" $v.s3.region -}}
{{- $_ := set $cfg "s3_path_style" $v.s3.pathStyle -}}
{{- else if eq (toString $v.coldStore) "off" -}}
{{- $_ := set $cfg "cold_store" "off" -}}
{{- else -}}
{{- fail (printf "coldStore %q: want off or s3 (an fs cold tier belongs on a host's own disk: use flash, or the systemd unit)" (toString $v.coldStore)) -}}
{{- end -}}
{{- if $v.etcd.endpoints -}}
{{- $_ := set $cfg "etcd_endpoints" (join "," $v.etcd.endpoints) -}}
{{- $_ := set $cfg "etcd_prefix" $v.etcd.prefix -}}
{{- if $v.etcd.tls.existingSecret -}}
{{- $_ := set $cfg "etcd_ca" "/etc/gpucache/etcd/ca.crt" -}}
{{- if $v.etcd.tls.clientCert -}}
{{- $_ := set $cfg "etcd_cert" "/etc/gpucache/etcd/tls.crt" -}}
{{- $_ := set $cfg "etcd_key" "/etc/gpucache/etcd/tls.key" -}}
{{- end -}}
{{- end -}}
{{- if $v.etcd.username -}}
{{- $_ := set $cfg "etcd_username" $v.etcd.username -}}
{{- $_ := set $cfg "etcd_password_file" (printf "/etc/gpucache/etcd-auth/%s" $v.etcd.passwordKey) -}}
{{- if not $v.etcd.passwordSecret -}}
{{- fail "etcd.username needs etcd.passwordSecret (a Secret holding the password under etcd.passwordKey)" -}}
{{- end -}}
{{- end -}}
{{- else if eq (include "gpucache.workload" .) "statefulset" -}}
{{- fail "workload statefulset is a shared pool: set etcd.endpoints (its nodes find each other and split the keys through etcd)" -}}
{{- end -}}
{{- if $v.flash.enabled -}}
{{- $_ := set $cfg "flash_dir" "/var/lib/gpucache/flash" -}}
{{- $_ := set $cfg "flash_capacity" (toString $v.flash.capacity) -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}
