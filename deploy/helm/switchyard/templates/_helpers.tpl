{{/* Names and labels. */}}
{{- define "switchyard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "switchyard.fullname" -}}
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

{{- define "switchyard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "switchyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of one component: include with (list . "worker"). */}}
{{- define "switchyard.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "switchyard.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "switchyard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "switchyard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "switchyard.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{/*
The container ports: the protocols' default ports, on which every listener
runs once SWITCHYARD_HOST moves it to the pod IP. Include with the root.
*/}}
{{- define "switchyard.containerPorts" -}}
- {name: admin, containerPort: {{ .Values.adminPort | int }}, protocol: TCP}
{{- if .Values.cluster.enabled }}
- {name: cluster, containerPort: 19980, protocol: TCP}
{{- end }}
{{- if .Values.config.uniffle.enabled }}
- {name: uniffle-coord, containerPort: 19999, protocol: TCP}
- {name: uniffle-grpc, containerPort: 19997, protocol: TCP}
- {name: uniffle-netty, containerPort: 19996, protocol: TCP}
{{- end }}
{{- if .Values.config.celeborn.enabled }}
- {name: celeborn-master, containerPort: 9097, protocol: TCP}
- {name: celeborn-rpc, containerPort: 9100, protocol: TCP}
- {name: celeborn-push, containerPort: 9101, protocol: TCP}
- {name: celeborn-fetch, containerPort: 9102, protocol: TCP}
- {name: celeborn-repl, containerPort: 9103, protocol: TCP}
{{- end }}
{{- end }}

{{/* The same ports as Service ports. */}}
{{- define "switchyard.servicePorts" -}}
- {name: admin, port: {{ .Values.adminPort | int }}, targetPort: admin, protocol: TCP}
{{- if .Values.config.uniffle.enabled }}
- {name: uniffle-coord, port: 19999, targetPort: uniffle-coord, protocol: TCP}
- {name: uniffle-grpc, port: 19997, targetPort: uniffle-grpc, protocol: TCP}
- {name: uniffle-netty, port: 19996, targetPort: uniffle-netty, protocol: TCP}
{{- end }}
{{- if .Values.config.celeborn.enabled }}
- {name: celeborn-master, port: 9097, targetPort: celeborn-master, protocol: TCP}
- {name: celeborn-rpc, port: 9100, targetPort: celeborn-rpc, protocol: TCP}
- {name: celeborn-push, port: 9101, targetPort: celeborn-push, protocol: TCP}
- {name: celeborn-fetch, port: 9102, targetPort: celeborn-fetch, protocol: TCP}
- {name: celeborn-repl, port: 9103, targetPort: celeborn-repl, protocol: TCP}
{{- end }}
{{- end }}

{{/*
The environment of every pod: the node id is the pod name, the host the pod
IP (docs/configuration.md, "The node: id and host").
*/}}
{{- define "switchyard.env" -}}
- name: SWITCHYARD_CONFIG
  value: /etc/switchyard/switchyard.toml
- name: SWITCHYARD_NODE_ID
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: SWITCHYARD_HOST
  valueFrom: {fieldRef: {fieldPath: status.podIP}}
{{- if .Values.cluster.enabled }}
- name: SWITCHYARD_CLUSTER_SECRET
  valueFrom: {secretKeyRef: {name: {{ include "switchyard.clusterSecretName" . }}, key: cluster-secret}}
- name: SWITCHYARD_ADMIN_TOKEN
  valueFrom: {secretKeyRef: {name: {{ include "switchyard.clusterSecretName" . }}, key: admin-token}}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Liveness on /healthz, readiness on /readyz (200 while a tier takes writes). */}}
{{- define "switchyard.probes" -}}
startupProbe:
  httpGet: {path: /healthz, port: admin}
  periodSeconds: 2
  failureThreshold: 60
livenessProbe:
  httpGet: {path: /healthz, port: admin}
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: admin}
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 2
{{- end }}

{{/* The Secret holding cluster-secret and admin-token. */}}
{{- define "switchyard.clusterSecretName" -}}
{{- default (printf "%s-cluster" (include "switchyard.fullname" .)) .Values.cluster.existingSecret -}}
{{- end }}

{{/* The coordinators' cluster addresses: their pods' DNS names behind the headless Service. */}}
{{- define "switchyard.coordinatorAddresses" -}}
{{- $full := include "switchyard.fullname" . -}}
{{- range $i, $_ := until (int .Values.coordinator.replicas) -}}
{{ if $i }}, {{ end }}"{{ $full }}-coordinator-{{ $i }}.{{ $full }}-coordinator-headless.{{ $.Release.Namespace }}.svc:19980"
{{- end -}}
{{- end }}
