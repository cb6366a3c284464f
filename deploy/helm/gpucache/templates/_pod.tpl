{{/* gpucache.podTemplate: the pod of both workloads. */}}
{{- define "gpucache.podTemplate" -}}
{{- $v := .Values -}}
{{- $w := include "gpucache.workload" . -}}
{{- $fullname := include "gpucache.fullname" . -}}
{{- $scheme := ternary "HTTPS" "HTTP" (and $v.tls.enabled true) -}}
{{- $mem := printf "%sMi" (include "gpucache.memoryMi" .) -}}
metadata:
  labels:
    {{- include "gpucache.selectorLabels" . | nindent 4 }}
    {{- with $v.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    checksum/config: {{ include "gpucache.config" . | sha256sum }}
    {{- with $v.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  automountServiceAccountToken: false
  enableServiceLinks: false
  terminationGracePeriodSeconds: {{ int $v.terminationGracePeriodSeconds }}
  {{- with $v.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with $v.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    fsGroup: 65532
    seccompProfile:
      type: RuntimeDefault
  containers:
    - name: gpucached
      image: "{{ $v.image.repository }}:{{ default .Chart.AppVersion $v.image.tag }}"
      imagePullPolicy: {{ $v.image.pullPolicy }}
      args: ["-config", "/etc/gpucache/config/gpucached.yaml"]
      ports:
        - name: data
          containerPort: {{ int $v.ports.data }}
          protocol: TCP
        - name: admin
          containerPort: {{ int $v.ports.admin }}
          protocol: TCP
      env:
        - name: POD_NAME
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
        - name: POD_NAMESPACE
          valueFrom:
            fieldRef:
              fieldPath: metadata.namespace
        - name: POD_IP
          valueFrom:
            fieldRef:
              fieldPath: status.podIP
        - name: NODE_NAME
          valueFrom:
            fieldRef:
              fieldPath: spec.nodeName
        {{- if eq $w "statefulset" }}
        - name: GPUCACHE_NODE_ID
          value: "$(POD_NAME)"
        - name: GPUCACHE_ADVERTISE_ADDR
          value: "$(POD_NAME).{{ $fullname }}-headless.$(POD_NAMESPACE).svc:{{ int $v.ports.data }}"
        {{- else }}
        - name: GPUCACHE_NODE_ID
          value: "$(NODE_NAME)"
        - name: GPUCACHE_ADVERTISE_ADDR
          value: "$(POD_IP):{{ int $v.ports.data }}"
        {{- end }}
        - name: GPUCACHE_FAULT_DOMAIN
          value: "$(NODE_NAME)"
        {{- if and (eq (toString $v.coldStore) "s3") $v.s3.credentialsSecret }}
        - name: AWS_ACCESS_KEY_ID
          valueFrom:
            secretKeyRef:
              name: {{ $v.s3.credentialsSecret }}
              key: {{ $v.s3.accessKeyKey }}
        - name: AWS_SECRET_ACCESS_KEY
          valueFrom:
            secretKeyRef:
              name: {{ $v.s3.credentialsSecret }}
              key: {{ $v.s3.secretKeyKey }}
        {{- end }}
        {{- with $v.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      resources:
        requests:
          memory: {{ $mem }}
          cpu: {{ $v.resources.cpu.request | quote }}
        limits:
          memory: {{ $mem }}
          {{- with $v.resources.cpu.limit }}
          cpu: {{ . | quote }}
          {{- end }}
      startupProbe:
        httpGet:
          path: /healthz
          port: admin
          scheme: {{ $scheme }}
        periodSeconds: 5
        failureThreshold: 120
      livenessProbe:
        httpGet:
          path: /healthz
          port: admin
          scheme: {{ $scheme }}
        periodSeconds: 10
        timeoutSeconds: 5
        failureThreshold: 3
      readinessProbe:
        httpGet:
          path: {{ ternary "/readyz?write=1" "/readyz" (and $v.probes.readinessRequiresWrites true) }}
          port: admin
          scheme: {{ $scheme }}
        periodSeconds: 5
        timeoutSeconds: 5
        failureThreshold: 2
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        runAsNonRoot: true
        capabilities:
          drop: ["ALL"]
      volumeMounts:
        - name: config
          mountPath: /etc/gpucache/config
          readOnly: true
        - name: tenant-secrets
          mountPath: /etc/gpucache/secrets
          readOnly: true
        {{- if $v.tls.enabled }}
        - name: tls
          mountPath: /etc/gpucache/tls
          readOnly: true
        {{- end }}
        {{- if $v.sealKeys.ids }}
        - name: seal-keys
          mountPath: /etc/gpucache/seal
          readOnly: true
        {{- end }}
        {{- if $v.coldEncryptionKeys.ids }}
        - name: cold-keys
          mountPath: /etc/gpucache/coldkeys
          readOnly: true
        {{- end }}
        {{- if and $v.etcd.endpoints $v.etcd.tls.existingSecret }}
        - name: etcd-tls
          mountPath: /etc/gpucache/etcd
          readOnly: true
        {{- end }}
        {{- if and $v.etcd.endpoints $v.etcd.username }}
        - name: etcd-auth
          mountPath: /etc/gpucache/etcd-auth
          readOnly: true
        {{- end }}
        {{- if $v.flash.enabled }}
        - name: flash
          mountPath: /var/lib/gpucache/flash
        {{- end }}
  volumes:
    - name: config
      configMap:
        name: {{ $fullname }}
    - name: tenant-secrets
      secret:
        secretName: {{ include "gpucache.tenantSecret" . }}
        defaultMode: 0400
    {{- if $v.tls.enabled }}
    - name: tls
      secret:
        secretName: {{ include "gpucache.tlsSecret" . }}
        defaultMode: 0400
    {{- end }}
    {{- if $v.sealKeys.ids }}
    - name: seal-keys
      secret:
        secretName: {{ include "gpucache.sealSecret" . }}
        defaultMode: 0400
    {{- end }}
    {{- if $v.coldEncryptionKeys.ids }}
    - name: cold-keys
      secret:
        secretName: {{ include "gpucache.coldKeySecret" . }}
        defaultMode: 0400
    {{- end }}
    {{- if and $v.etcd.endpoints $v.etcd.tls.existingSecret }}
    - name: etcd-tls
      secret:
        secretName: {{ $v.etcd.tls.existingSecret }}
        defaultMode: 0400
    {{- end }}
    {{- if and $v.etcd.endpoints $v.etcd.username }}
    - name: etcd-auth
      secret:
        secretName: {{ $v.etcd.passwordSecret }}
        defaultMode: 0400
        items:
          - key: {{ $v.etcd.passwordKey }}
            path: {{ $v.etcd.passwordKey }}
    {{- end }}
    {{- if and $v.flash.enabled (eq $v.flash.volume "hostPath") }}
    - name: flash
      hostPath:
        path: {{ required "flash.hostPath.path is required with flash.volume hostPath" $v.flash.hostPath.path }}
        type: Directory
    {{- end }}
  {{- with $v.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
