{{/* The chart's name. */}}
{{- define "ration.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's objects' base name. */}}
{{- define "ration.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "ration.headless" -}}
{{- printf "%s-headless" (include "ration.fullname" .) -}}
{{- end -}}

{{- define "ration.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ration.labels" -}}
helm.sh/chart: {{ include "ration.chart" . }}
app.kubernetes.io/name: {{ include "ration.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "ration.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ration.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ration.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ration.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "ration.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The DNS suffix after NAME-headless: .NAMESPACE.svc[.DOMAIN]. */}}
{{- define "ration.dnsSuffix" -}}
{{- printf "%s.%s.svc" (include "ration.headless" .) .Release.Namespace -}}
{{- with .Values.clusterDomain }}.{{ . }}{{ end -}}
{{- end -}}

{{/* Every server's stable name and PORT, comma-separated: (list $ PORT). */}}
{{- define "ration.serverAddrs" -}}
{{- $root := index . 0 -}}
{{- $port := index . 1 -}}
{{- $full := include "ration.fullname" $root -}}
{{- $suffix := include "ration.dnsSuffix" $root -}}
{{- $addrs := list -}}
{{- range $i := until (int $root.Values.replicas) -}}
{{- $addrs = append $addrs (printf "%s-%d.%s:%d" $full $i $suffix (int $port)) -}}
{{- end -}}
{{- join "," $addrs -}}
{{- end -}}

{{- define "ration.tlsServerName" -}}
{{- printf "server.%s.ration" .Values.tls.clusterName -}}
{{- end -}}

{{- define "ration.aclBootstrapSecret" -}}
{{- default (printf "%s-acl-bootstrap" (include "ration.fullname" .)) .Values.acl.bootstrap.secretName -}}
{{- end -}}

{{/* The Secret the policy Job's token comes from ("" for none). */}}
{{- define "ration.policyTokenSecret" -}}
{{- if .Values.policies.tokenSecret -}}
{{- .Values.policies.tokenSecret -}}
{{- else if .Values.acl.enabled -}}
{{- include "ration.aclBootstrapSecret" . -}}
{{- end -}}
{{- end -}}

{{/* rationctl's TLS flags (YAML list items), for a Secret mounted at tls.mountPath. */}}
{{- define "ration.ctlTLSFlags" -}}
{{- if .Values.tls.enabled -}}
- --tls-ca-file={{ .Values.tls.mountPath }}/ca.crt
- --tls-cert-file={{ .Values.tls.mountPath }}/tls.crt
- --tls-key-file={{ .Values.tls.mountPath }}/tls.key
- --tls-server-name={{ include "ration.tlsServerName" . }}
{{- end }}
{{- end -}}

{{/* rationd's and rationd edge's TLS flags. */}}
{{- define "ration.serveTLSFlags" -}}
{{- if .Values.tls.enabled -}}
- --tls-ca-file={{ .Values.tls.mountPath }}/ca.crt
- --tls-cert-file={{ .Values.tls.mountPath }}/tls.crt
- --tls-key-file={{ .Values.tls.mountPath }}/tls.key
- --tls-verify-server-hostname
- --cluster-name={{ .Values.tls.clusterName }}
{{- end }}
{{- end -}}

{{/* A Secret volume: (list NAME SECRET OPTIONAL). */}}
{{- define "ration.secretVolume" -}}
- name: {{ index . 0 }}
  secret:
    secretName: {{ index . 1 }}
    defaultMode: 0440
    {{- if index . 2 }}
    optional: true
    {{- end }}
{{- end -}}
