{{/* The chart's name, and the release's full name (at most 63 characters). */}}
{{- define "hookgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hookgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "hookgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "hookgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "hookgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hookgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The roles that get a Deployment: all, or api and worker. */}}
{{- define "hookgate.roles" -}}
{{- if .Values.split }}api worker{{ else }}all{{ end }}
{{- end }}

{{/* The role whose pods the Service sends requests to. */}}
{{- define "hookgate.ingestRole" -}}
{{- if .Values.split }}api{{ else }}all{{ end }}
{{- end }}

{{- define "hookgate.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The Secret the containers read: the chart's, or existingSecret. */}}
{{- define "hookgate.secretName" -}}
{{- if .Values.secrets.create }}
{{- include "hookgate.fullname" . }}
{{- else }}
{{- required "secrets.existingSecret: name a Secret of yours, or set secrets.create" .Values.secrets.existingSecret }}
{{- end }}
{{- end }}

{{/* The names of the senders' variables (secrets.senders and senderKeys), sorted. */}}
{{- define "hookgate.senderKeys" -}}
{{- $keys := concat (keys .Values.secrets.senders) .Values.secrets.senderKeys | uniq | sortAlpha }}
{{- range $keys }}
{{- if not (regexMatch "^[A-Za-z_][A-Za-z0-9_]*$" .) }}
{{- fail (printf "secrets.senders: %q is not an environment variable's name (letters, digits, _)" .) }}
{{- end }}
{{- end }}
{{- join " " $keys }}
{{- end }}

{{/*
The Secret's key with a role's DATABASE_URL: database-url-<role> in the
chart's Secret (with the role's pool_max_conns), database-url in yours.
*/}}
{{- define "hookgate.databaseKey" -}}
{{- if .root.Values.secrets.create }}database-url-{{ .role }}{{ else }}database-url{{ end }}
{{- end }}

{{/* DATABASE_URL with pool_max_conns n, unless the URL sets it. */}}
{{- define "hookgate.poolURL" -}}
{{- if contains "pool_max_conns=" .url }}{{ .url }}
{{- else }}{{ .url }}{{ ternary "&" "?" (contains "?" .url) }}pool_max_conns={{ .n }}
{{- end }}
{{- end }}

{{/* The hookgate.yaml text. */}}
{{- define "hookgate.config" -}}
{{- $c := required "config: give hookgate.yaml (the senders) as text (config: |): docs/configuration.md#hookgateyaml" .Values.config }}
{{- if not (kindIs "string" $c) }}{{ fail "config: give hookgate.yaml as text (config: |), not as YAML values" }}{{ end }}
{{- $c }}
{{- end }}

{{/* The security contexts and scheduling of every pod. */}}
{{- define "hookgate.podSpecCommon" -}}
automountServiceAccountToken: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The environment of a hookgate container of role (.role; "migrate" for the
Job): the settings, then the Secret's values.
*/}}
{{- define "hookgate.env" -}}
{{- $root := .root }}
{{- $secret := include "hookgate.secretName" $root }}
{{- if ne .role "migrate" }}
- name: HOOKGATE_ADDR
  value: {{ printf ":%d" (int $root.Values.service.port) | quote }}
- name: HOOKGATE_METRICS_ADDR
  value: {{ printf ":%d" (int $root.Values.service.metricsPort) | quote }}
- name: HOOKGATE_CONFIG
  value: /etc/hookgate/hookgate.yaml
{{- if $root.Values.configWatch }}
- name: HOOKGATE_CONFIG_WATCH
  value: "true"
{{- end }}
- name: HOOKGATE_SHUTDOWN_TIMEOUT
  value: {{ $root.Values.shutdownTimeout | quote }}
{{- $env := merge (dict) (index $root.Values .role).env $root.Values.env }}
{{- range $k := keys $env | sortAlpha }}
- name: {{ $k }}
  value: {{ index $env $k | toString | quote }}
{{- end }}
{{- end }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ if eq .role "migrate" }}database-url{{ else }}{{ include "hookgate.databaseKey" (dict "root" $root "role" .role) }}{{ end }}
{{- if ne .role "migrate" }}
- name: HOOKGATE_ADMIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: admin-token
      optional: true
{{- range $k := splitList " " (include "hookgate.senderKeys" $root) }}
{{- if $k }}
- name: {{ $k }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $k }}
{{- end }}
{{- end }}
{{- end }}
{{- with $root.Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}
