{{/* Names and labels */}}
{{- define "serve-app.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "serve-app.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "serve-app.selectorLabels" -}}
app.kubernetes.io/name: {{ include "serve-app.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "serve-app.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{ include "serve-app.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "serve-app.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "serve-app.secretName" -}}
{{- .Values.secrets.existingSecret | default (printf "%s-secrets" (include "serve-app.fullname" .)) -}}
{{- end -}}

{{- define "serve-app.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "serve-app.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* The application configuration: files/config.yaml deep-merged with .Values.config. */}}
{{- define "serve-app.config" -}}
{{- $base := .Files.Get "files/config.yaml" | fromYaml -}}
{{- $merged := mergeOverwrite (deepCopy $base) (deepCopy (.Values.config | default dict)) -}}
{{- /* A deployment's `resources` given in values replaces the file's (a merge could never
drop a custom resource such as dense_gpu, so a CPU install would still ask for a GPU group). */ -}}
{{- range $name, $options := ((.Values.config | default dict).serve | default dict) -}}
{{- if and (kindIs "map" $options) (hasKey $options "resources") -}}
{{- $_ := set (index $merged.serve $name) "resources" (deepCopy ($options.resources | default dict)) -}}
{{- end -}}
{{- end -}}
{{- /* Store endpoints and credential variables from the chart's `stores` values. */ -}}
{{- $stores := $merged.stores | default dict -}}
{{- $os := $stores.opensearch | default dict -}}
{{- $qd := $stores.qdrant | default dict -}}
{{- with .Values.stores.opensearch.hosts }}{{ $_ := set $os "hosts" . }}{{ end -}}
{{- if .Values.stores.opensearch.existingSecret -}}
{{- $_ := set $os "username_env" "SERVE_APP_OPENSEARCH_USERNAME" -}}
{{- $_ := set $os "password_env" "SERVE_APP_OPENSEARCH_PASSWORD" -}}
{{- end -}}
{{- with .Values.stores.qdrant.url }}{{ $_ := set $qd "url" . }}{{ end -}}
{{- if .Values.stores.qdrant.existingSecret -}}
{{- $_ := set $qd "api_key_env" "SERVE_APP_QDRANT_API_KEY" -}}
{{- end -}}
{{- if $os }}{{ $_ := set $stores "opensearch" $os }}{{ end -}}
{{- if $qd }}{{ $_ := set $stores "qdrant" $qd }}{{ end -}}
{{- $_ := set $merged "stores" $stores -}}
{{- toYaml $merged -}}
{{- end -}}

{{/*
One Serve deployment's options from config.serve.<name>, mirroring
deployments/options.py:deployment_options (a test compares the two).
*/}}
{{- define "serve-app.deploymentOptions" -}}
{{- $name := index . 0 -}}
{{- $s := index . 1 | default dict -}}
{{- $ongoingDefault := ternary 64 16 (eq $name "ingress") -}}
- name: {{ $name }}
  max_ongoing_requests: {{ $s.max_ongoing_requests | default $ongoingDefault }}
  health_check_period_s: 10.0
  health_check_timeout_s: 30.0
  {{- /* Serve's access log: the ingress' by default, not the internal calls' (config.py) */}}
  {{- $accessLog := eq $name "ingress" }}
  {{- if and (hasKey $s "access_log") (not (kindIs "invalid" $s.access_log)) }}
  {{- $accessLog = $s.access_log }}
  {{- end }}
  logging_config:
    encoding: TEXT
    log_level: INFO
    logs_dir: null
    enable_access_log: {{ $accessLog }}
    additional_log_standard_attrs: []
  {{- if $s.autoscaling }}
  {{- $a := $s.autoscaling }}
  autoscaling_config:
    min_replicas: {{ if hasKey $a "min_replicas" }}{{ $a.min_replicas }}{{ else }}1{{ end }}
    max_replicas: {{ $a.max_replicas | default 1 }}
    target_ongoing_requests: {{ $a.target_ongoing_requests | default 2.0 | float64 }}
    upscale_delay_s: {{ if hasKey $a "upscale_delay_s" }}{{ $a.upscale_delay_s | float64 }}{{ else }}30.0{{ end }}
    downscale_delay_s: {{ if hasKey $a "downscale_delay_s" }}{{ $a.downscale_delay_s | float64 }}{{ else }}600.0{{ end }}
  {{- else }}
  num_replicas: {{ $s.num_replicas | default 1 }}
  {{- end }}
  ray_actor_options:
    num_cpus: {{ if hasKey $s "num_cpus" }}{{ $s.num_cpus | float64 }}{{ else }}0.5{{ end }}
    {{- if and (hasKey $s "num_gpus") (gt ($s.num_gpus | float64) 0.0) }}
    num_gpus: {{ $s.num_gpus | float64 }}
    {{- end }}
    {{- if $s.accelerator_type }}
    accelerator_type: {{ $s.accelerator_type }}
    {{- end }}
    {{- if $s.memory_bytes }}
    memory: {{ $s.memory_bytes }}
    {{- end }}
    {{- if $s.resources }}
    resources:
      {{- range $key, $value := $s.resources }}
      {{ $key }}: {{ $value | float64 }}
      {{- end }}
    {{- end }}
{{- end -}}

{{/* serveConfigV2: the graph builder with the whole configuration inline. */}}
{{- define "serve-app.serveConfig" -}}
{{- $config := include "serve-app.config" . | fromYaml -}}
{{- $serve := $config.serve | default dict -}}
{{- $splade := $config.splade | default dict -}}
{{- $reranker := $config.reranker | default dict -}}
applications:
  - name: {{ $serve.app_name | default "retrieval" }}
    route_prefix: {{ $serve.route_prefix | default "/" }}
    import_path: deployments.app:build_app
    args:
      config:
        {{- toYaml $config | nindent 8 }}
    deployments:
      {{- include "serve-app.deploymentOptions" (list "chunker" $serve.chunker) | nindent 6 }}
      {{- include "serve-app.deploymentOptions" (list "dense" $serve.dense) | nindent 6 }}
      {{- if or (not (hasKey $splade "enabled")) $splade.enabled }}
      {{- include "serve-app.deploymentOptions" (list "splade" $serve.splade) | nindent 6 }}
      {{- end }}
      {{- if $reranker.enabled }}
      {{- include "serve-app.deploymentOptions" (list "reranker" $serve.reranker) | nindent 6 }}
      {{- end }}
      {{- include "serve-app.deploymentOptions" (list "store" $serve.store) | nindent 6 }}
      {{- include "serve-app.deploymentOptions" (list "ingress" $serve.ingress) | nindent 6 }}
{{- end -}}

{{/* Environment shared by every Ray container: offline models, secrets, store credentials. */}}
{{- define "serve-app.env" -}}
{{- $config := include "serve-app.config" . | fromYaml -}}
{{- /* Ray Serve reads its switches (serve.env: HAProxy, throughput mode) when its processes
start: controller and proxies on the head, proxies and replicas on workers. */}}
{{- range $key, $value := (($config.serve | default dict).env | default dict) }}
- name: {{ $key }}
  value: {{ $value | toString | quote }}
{{- end }}
- name: HF_HUB_OFFLINE
  value: "1"
- name: HF_HOME
  value: {{ printf "%s/hf" .Values.modelCache.mountPath | quote }}
- name: SERVE_APP_JWT_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ include "serve-app.secretName" . }}
      key: jwt-secret
      optional: true
{{- with .Values.stores.opensearch.existingSecret }}
- name: SERVE_APP_OPENSEARCH_USERNAME
  valueFrom: {secretKeyRef: {name: {{ . }}, key: username}}
- name: SERVE_APP_OPENSEARCH_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ . }}, key: password}}
{{- end }}
{{- with .Values.stores.qdrant.existingSecret }}
- name: SERVE_APP_QDRANT_API_KEY
  valueFrom: {secretKeyRef: {name: {{ . }}, key: api-key}}
{{- end }}
{{- end -}}

{{- define "serve-app.volumeMounts" -}}
- name: dshm
  mountPath: /dev/shm
- name: tmp
  mountPath: /tmp
{{- if ne .Values.modelCache.type "none" }}
- name: models
  mountPath: {{ .Values.modelCache.mountPath }}
{{- end }}
{{- if .Values.dataVolume.enabled }}
- name: data
  mountPath: {{ .Values.dataVolume.mountPath }}
{{- end }}
{{- end -}}

{{- define "serve-app.volumes" -}}
- name: dshm
  emptyDir: {medium: Memory, sizeLimit: {{ .Values.shm.sizeLimit }}}
- name: tmp
  emptyDir: {}
{{- if eq .Values.modelCache.type "pvc" }}
- name: models
  persistentVolumeClaim:
    claimName: {{ .Values.modelCache.existingClaim | default (printf "%s-models" (include "serve-app.fullname" .)) }}
    readOnly: true
{{- else if eq .Values.modelCache.type "hostPath" }}
- name: models
  hostPath: {path: {{ .Values.modelCache.hostPath }}, type: DirectoryOrCreate}
{{- end }}
{{- if .Values.dataVolume.enabled }}
- name: data
  persistentVolumeClaim:
    claimName: {{ printf "%s-data" (include "serve-app.fullname" .) }}
{{- end }}
{{- end -}}

{{/* One Ray container (head or worker). Arguments: (list $ "ray-head"|"ray-worker" resources extraLimits) */}}
{{- define "serve-app.container" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $resources := index . 2 -}}
{{- $gpus := index . 3 -}}
- name: {{ $name }}
  image: {{ include "serve-app.image" $root }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  env:
    {{- include "serve-app.env" $root | nindent 4 }}
  ports:
    - {containerPort: 8000, name: serve}
    - {containerPort: 8080, name: metrics}
  {{- if eq $name "ray-head" }}
    - {containerPort: 6379, name: gcs}
    - {containerPort: 8265, name: dashboard}
    - {containerPort: 10001, name: client}
  {{- end }}
  # No probes here: KubeRay injects its own into Ray containers that have none (the raylet's
  # health and, on RayService workers, the local Serve proxy's /-/healthz). The app-wide
  # /readyz would take every worker out of the Service when one model deployment is slow.
  resources:
    requests:
      {{- toYaml $resources.requests | nindent 6 }}
    limits:
      {{- toYaml $resources.limits | nindent 6 }}
      {{- if gt (int $gpus) 0 }}
      nvidia.com/gpu: {{ $gpus }}
      {{- end }}
  securityContext:
    {{- toYaml $root.Values.containerSecurityContext | nindent 4 }}
  volumeMounts:
    {{- include "serve-app.volumeMounts" $root | nindent 4 }}
{{- end -}}

{{/* The RayService upgrade strategy; NewCluster would run two store owners on one shard. */}}
{{- define "serve-app.upgradeStrategy" -}}
{{- $config := include "serve-app.config" . | fromYaml -}}
{{- $embedded := eq (($config.stores | default dict).topology | default "embedded") "embedded" -}}
{{- $strategy := .Values.upgradeStrategy | default (ternary "None" "NewCluster" $embedded) -}}
{{- if and $embedded (eq $strategy "NewCluster") -}}
{{- fail "upgradeStrategy NewCluster with stores.topology embedded: two clusters would open the same shard directory during the upgrade; use upgradeStrategy None or a server topology (opensearch+qdrant)" -}}
{{- end -}}
{{- $strategy -}}
{{- end -}}

{{/* Ingress annotations: for ingress-nginx, limits sized to the API's own (its defaults, a
1 MiB body and 60 s timeouts, would cut off uploads the API accepts), then the values'
annotations, which win. The proxy waits 30 s past the API's longest deadline, so a client
gets the API's own 504 rather than the proxy's; request buffering is off so an upload
streams to the API, which authenticates and counts bytes before reading the body. */}}
{{- define "serve-app.ingressAnnotations" -}}
{{- $config := include "serve-app.config" . | fromYaml -}}
{{- $api := $config.api | default dict -}}
{{- $out := dict -}}
{{- if contains "nginx" (.Values.ingress.className | default "") -}}
{{- $deadline := max (int ($api.ingest_timeout_s | default 900)) (int ($api.request_timeout_s | default 30)) -}}
{{- $_ := set $out "nginx.ingress.kubernetes.io/proxy-body-size" (printf "%d" (int64 ($api.max_request_bytes | default 50000000))) -}}
{{- $_ := set $out "nginx.ingress.kubernetes.io/proxy-read-timeout" (printf "%d" (add $deadline 30)) -}}
{{- $_ := set $out "nginx.ingress.kubernetes.io/proxy-send-timeout" (printf "%d" (add $deadline 30)) -}}
{{- $_ := set $out "nginx.ingress.kubernetes.io/proxy-request-buffering" "off" -}}
{{- end -}}
{{- $out = mergeOverwrite $out (.Values.ingress.annotations | default dict) -}}
{{- if $out }}{{ toYaml $out }}{{ end -}}
{{- end -}}
