{{/* Names, labels and the values checks every template shares. */}}

{{- define "sluicegate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluicegate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "sluicegate.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "sluicegate.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sluicegate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "sluicegate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: include "sluicegate.selector" (list . "gateway") */}}
{{- define "sluicegate.selector" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "sluicegate.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "sluicegate.gateway" -}}{{ include "sluicegate.fullname" . }}-gateway{{- end -}}
{{- define "sluicegate.engine" -}}{{ include "sluicegate.fullname" . }}-engine{{- end -}}
{{- define "sluicegate.engineHeadless" -}}{{ include "sluicegate.fullname" . }}-engine-headless{{- end -}}
{{- define "sluicegate.redis" -}}{{ include "sluicegate.fullname" . }}-redis{{- end -}}

{{/* The engine pools, as {"pools": [{role, name, headless, replicaCount, resources, extraArgs}]} (fromYaml it): one
pool named as ever (role "": no --kv-role) or, with engine.disaggregated.enabled, a prefill and a decode pool, each
its own StatefulSet and headless Service, so each scales on its own. What a pool leaves null is engine.*'s. */}}
{{- define "sluicegate.enginePools" -}}
{{- $e := .Values.engine -}}
{{- $pools := list -}}
{{- if (default (dict) $e.disaggregated).enabled -}}
{{- range $role := list "prefill" "decode" -}}
{{- $p := default (dict) (index $e.disaggregated $role) -}}
{{- $name := printf "%s-%s" (include "sluicegate.engine" $) $role -}}
{{- $pools = append $pools (dict
  "role" $role
  "name" $name
  "headless" (printf "%s-headless" $name)
  "replicaCount" (ternary $e.replicaCount $p.replicaCount (kindIs "invalid" $p.replicaCount))
  "resources" (default $e.resources $p.resources)
  "extraArgs" (ternary $e.extraArgs $p.extraArgs (kindIs "invalid" $p.extraArgs))
) -}}
{{- end -}}
{{- else -}}
{{- $pools = list (dict
  "role" ""
  "name" (include "sluicegate.engine" .)
  "headless" (include "sluicegate.engineHeadless" .)
  "replicaCount" $e.replicaCount
  "resources" $e.resources
  "extraArgs" $e.extraArgs
) -}}
{{- end -}}
{{- dict "pools" $pools | toYaml -}}
{{- end -}}

{{/* Selector labels of an engine pool: include "sluicegate.engineSelector" (list . role); role "" (one pool): the
engines' own, as ever; else those plus the pool's KV role, so a StatefulSet, its Service and its PDB take its Pods
only while everything that selects component=engine (ServiceMonitor, kubectl) still sees every engine. */}}
{{- define "sluicegate.engineSelector" -}}
{{- include "sluicegate.selector" (list (index . 0) "engine") -}}
{{- with index . 1 }}
sluicegate/kv-role: {{ . }}
{{- end -}}
{{- end -}}

{{- define "sluicegate.servedModel" -}}
{{- default .Values.engine.modelDir .Values.engine.servedModelName -}}
{{- end -}}

{{- define "sluicegate.image" -}}
{{- printf "%s:%s" .image.repository (default .appVersion .image.tag) -}}
{{- end -}}

{{/* The admin token's Secret and key; no default token: rendering stops with a message naming the values. */}}
{{- define "sluicegate.adminSecret" -}}
{{- if .Values.adminToken.existingSecret -}}
{{- .Values.adminToken.existingSecret -}}
{{- else -}}
{{- $_ := required "adminToken.value or adminToken.existingSecret is required: the admin API has no default token (make one with `openssl rand -hex 32`)" .Values.adminToken.value -}}
{{- include "sluicegate.fullname" . }}-admin
{{- end -}}
{{- end -}}

{{- define "sluicegate.adminSecretKey" -}}
{{- if .Values.adminToken.existingSecret -}}{{ .Values.adminToken.existingSecretKey }}{{- else -}}admin-token{{- end -}}
{{- end -}}

{{/* How the gateway reaches Redis: external (a URL in a Secret), bundled, or none (the in-process store). */}}
{{- define "sluicegate.redisMode" -}}
{{- $given := 0 -}}
{{- if .Values.redis.url }}{{ $given = add1 $given }}{{ end -}}
{{- if .Values.redis.existingSecret }}{{ $given = add1 $given }}{{ end -}}
{{- if .Values.redis.bundled.enabled }}{{ $given = add1 $given }}{{ end -}}
{{- if gt $given 1 -}}
{{- fail "redis: give one of redis.url, redis.existingSecret or redis.bundled.enabled, not several" -}}
{{- else if .Values.redis.bundled.enabled -}}bundled
{{- else if or .Values.redis.url .Values.redis.existingSecret -}}external
{{- else -}}none
{{- end -}}
{{- end -}}

{{- define "sluicegate.redisPasswordSecret" -}}
{{- if .Values.redis.bundled.existingSecret -}}
{{- .Values.redis.bundled.existingSecret -}}
{{- else -}}
{{- $password := required "redis.bundled.password or redis.bundled.existingSecret is required: the bundled Redis has no default password" .Values.redis.bundled.password -}}
{{- if not (regexMatch "^[A-Za-z0-9._~-]+$" $password) -}}
{{- fail "redis.bundled.password goes into the gateway's redis:// URL: use URL-safe characters only (A-Z a-z 0-9 . _ ~ -)" -}}
{{- end -}}
{{- include "sluicegate.redis" . }}-auth
{{- end -}}
{{- end -}}

{{- define "sluicegate.redisPasswordKey" -}}
{{- if .Values.redis.bundled.existingSecret -}}{{ .Values.redis.bundled.existingSecretPasswordKey }}{{- else -}}redis-password{{- end -}}
{{- end -}}

{{/* Gateway instances for fail-open limits: the configured number, else the most Pods times workers. */}}
{{- define "sluicegate.numInstances" -}}
{{- $g := .Values.gateway -}}
{{- if gt (int $g.numInstances) 0 -}}{{ int $g.numInstances }}
{{- else if $g.autoscaling.enabled -}}{{ mul (int $g.autoscaling.maxReplicas) (int $g.workers) }}
{{- else -}}{{ mul (int $g.replicaCount) (int $g.workers) }}
{{- end -}}
{{- end -}}

{{/* The served model's discovery section of gateway.yaml, as {"discovery": ...} (fromYaml it): one entry for one
engine pool, a list of entries (with their roles) for a prefill and a decode pool. */}}
{{- define "sluicegate.discovery" -}}
{{- $pools := (include "sluicegate.enginePools" . | fromYaml).pools -}}
{{- $entries := list -}}
{{- range $pool := $pools -}}
{{- $entry := include "sluicegate.discoveryEntry" (list $ $pool.headless) | fromYaml -}}
{{- if $pool.role -}}
{{- $_ := set $entry "role" $pool.role -}}
{{- end -}}
{{- $entries = append $entries $entry -}}
{{- end -}}
{{- dict "discovery" (ternary (first $entries) $entries (eq (len $entries) 1)) | toYaml -}}
{{- end -}}

{{/* One discovery entry: the pool's headless Service, as gateway.discovery.mode reads it. */}}
{{- define "sluicegate.discoveryEntry" -}}
{{- $root := index . 0 -}}
{{- $svc := index . 1 -}}
{{- $d := $root.Values.gateway.discovery -}}
{{- $fqdn := printf "%s.%s.svc.%s" $svc $root.Release.Namespace $root.Values.clusterDomain -}}
{{- if eq $d.mode "dns" -}}
{{- dict "dns" $fqdn "port" (int $root.Values.engine.port) "interval_s" $d.interval_s | toYaml -}}
{{- else if eq $d.mode "srv" -}}
{{- dict "srv" (printf "_http._tcp.%s" $fqdn) "interval_s" $d.interval_s | toYaml -}}
{{- else if eq $d.mode "kubernetes" -}}
{{- dict "kubernetes" (dict "service" $svc "namespace" $root.Release.Namespace "port_name" "http") "interval_s" $d.interval_s | toYaml -}}
{{- else -}}
{{- fail (printf "gateway.discovery.mode must be dns, srv or kubernetes (got %q)" $d.mode) -}}
{{- end -}}
{{- end -}}

{{- define "sluicegate.podSecurity" -}}
runAsNonRoot: true
runAsUser: {{ .uid }}
runAsGroup: {{ .uid }}
fsGroup: {{ .uid }}
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "sluicegate.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end -}}
