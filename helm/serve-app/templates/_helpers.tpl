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

{{/* A Ray pod's metadata: the chart's own labels (which its Services, budgets, policies and
PodMonitor select by), then the group's podLabels and podAnnotations (karpenter.sh/do-not-disrupt
and the like). A podLabels key that is one of the chart's own would move the pod out of its
selectors: refused. Called with (root, the group's values, role, group name or ""). */}}
{{- define "serve-app.podMetadata" -}}
{{- $root := index . 0 -}}
{{- $group := index . 1 -}}
{{- $own := include "serve-app.selectorLabels" $root | fromYaml -}}
{{- $_ := set $own "serve-app/role" (index . 2) -}}
{{- with index . 3 }}{{ $_ := set $own "serve-app/group" . }}{{ end -}}
{{- range $key, $_ := $group.podLabels | default dict -}}
{{- if hasKey $own $key -}}
{{- fail (printf "podLabels: %s is one of the chart's own labels (its selectors use it)" $key) -}}
{{- end -}}
{{- end -}}
labels:
  {{- toYaml (merge $own ($group.podLabels | default dict)) | nindent 2 }}
{{- with $group.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end -}}
{{- end -}}

{{/* A Ray group's scheduling extras from its values: priorityClassName (GPU pods preempt batch
work instead of waiting), runtimeClassName (e.g. nvidia where the NVIDIA runtime is not the
node's default), topologySpreadConstraints (the group's pods over zones or nodes; select them
with serve-app/group). Empty when none is set. */}}
{{- define "serve-app.podPlacement" -}}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .runtimeClassName }}
runtimeClassName: {{ . }}
{{- end }}
{{- with .topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The validate Job's pods: none of the Ray pods' labels (their NetworkPolicies, budgets and
PodMonitor select by app.kubernetes.io/name), one policy of their own. */}}
{{- define "serve-app.validateSelectorLabels" -}}
app.kubernetes.io/name: {{ include "serve-app.name" . }}-validate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: validate
{{- end -}}

{{- define "serve-app.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{ include "serve-app.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/*
The image: there is no published one, so image.repository must name the one you built and
pushed. Refused: empty; not an image repository (an unexpanded $REGISTRY or <registry>); a host
of the names reserved for examples (RFC 2606: example.com/.net/.org, *.example, *.invalid),
which no registry serves; the chart's former default ghcr.io/serve-app/serve-app, never
published. The tag defaults to the chart's appVersion.
*/}}
{{- define "serve-app.image" -}}
{{- $repo := .Values.image.repository | default "" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- $component := "[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*" -}}
{{- $label := "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])" -}}
{{- $domain := printf "(?:%s(?:\\.%s)+(?::[0-9]+)?|%s:[0-9]+|localhost)" $label $label $label -}}
{{- $reference := printf "^(?:%s/)?%s(?:/%s)*$" $domain $component $component -}}
{{- $host := first (splitList "/" $repo) | lower -}}
{{- $why := "" -}}
{{- if not $repo -}}
{{- $why = "image.repository is empty" -}}
{{- else if not (regexMatch $reference $repo) -}}
{{- $why = printf "image.repository %q is no image repository (an unexpanded variable or placeholder?)" $repo -}}
{{- else if or (regexMatch "^(?:[^/]*\\.)?example\\.(?:com|net|org)(?::[0-9]+)?$" $host) (regexMatch "\\.(?:example|invalid)(?::[0-9]+)?$" $host) -}}
{{- $why = printf "image.repository %q is on %s, a name reserved for examples" $repo $host -}}
{{- else if eq $repo "ghcr.io/serve-app/serve-app" -}}
{{- $why = printf "image.repository %q was never published" $repo -}}
{{- end -}}
{{- if $why -}}
{{- fail (printf "%s. Build the image from the Dockerfile at the repository root and push it where your nodes pull from: `docker build -t <registry>/serve-app:%s . && docker push <registry>/serve-app:%s`; then set image.repository=<registry>/serve-app (image.tag defaults to the chart's appVersion, %s)" $why $tag $tag .Chart.AppVersion) -}}
{{- end -}}
{{- $digest := .Values.image.digest | default "" -}}
{{- /* values.schema.json holds it to sha256:<64 hex digits> */ -}}
{{- if $digest -}}
{{ $repo }}@{{ $digest }}
{{- else -}}
{{ $repo }}:{{ $tag }}
{{- end -}}
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

{{/* The application configuration: files/config.yaml deep-merged with .Values.config (built
once per render: a dozen helpers ask for it, and building it each time was most of a render's
0.9 s). */}}
{{- define "serve-app.config" -}}
{{- include "serve-app.once" (list . "serve-app.mergedConfig") -}}
{{- end -}}

{{/* `include NAME $` computed once per render: kept on the root context, which every template
of the chart shares (for helpers that depend on the values alone, asked for in loops). */}}
{{- define "serve-app.once" -}}
{{- $root := index . 0 -}}
{{- $key := printf "serve-app.once:%s" (index . 1) -}}
{{- if not (hasKey $root $key) -}}
{{- $_ := set $root $key (include (index . 1) $root) -}}
{{- end -}}
{{- get $root $key -}}
{{- end -}}

{{- define "serve-app.mergedConfig" -}}
{{- $base := .Files.Get "files/config.yaml" | fromYaml -}}
{{- $merged := mergeOverwrite (deepCopy $base) (deepCopy (.Values.config | default dict)) -}}
{{- /* The configuration is rendered into the RayService (serveConfigV2), which anyone who
may read RayServices reads: a secret written in it would be published there. */ -}}
{{- $jwt := ((($merged.api | default dict).auth | default dict).jwt | default dict) -}}
{{- if $jwt.secret -}}
{{- fail "config.api.auth.jwt.secret would be written into the RayService's serveConfigV2, readable by anyone who may read RayServices: put the secret in secrets.jwtSecret (the chart's Secret, SERVE_APP_JWT_SECRET on every Ray container) and set config.api.auth.jwt.secret_env: SERVE_APP_JWT_SECRET" -}}
{{- end -}}
{{- /* A deployment's `resources` given in values replaces the file's (a merge could never
drop a custom resource such as dense_slot, so a CPU install would still ask for a GPU group). */ -}}
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
{{- /* The embedded store's replica must run where its data volume is: only the store group
mounts it and advertises the Ray resource data_volume, which the store asks for. That group
advertises no CPU and the store asks for none (its pod's CPUs are the container's), so no other
replica can take the store's place there. */ -}}
{{- if include "serve-app.storePinned" . -}}
{{- $serve := $merged.serve | default dict -}}
{{- $store := index $serve "store" | default dict -}}
{{- $resources := deepCopy ($store.resources | default dict) -}}
{{- $_ := set $resources "data_volume" 1 -}}
{{- $_ := set $store "resources" $resources -}}
{{- $_ := set $store "num_cpus" 0 -}}
{{- $_ := set $serve "store" $store -}}
{{- $_ := set $merged "serve" $serve -}}
{{- end -}}
{{- toYaml $merged -}}
{{- end -}}

{{/* "true" when the store is the embedded one with a data volume (pinned to the store group). */}}
{{- define "serve-app.storePinned" -}}
{{- include "serve-app.once" (list . "serve-app.storePinnedEach") -}}
{{- end -}}

{{- define "serve-app.storePinnedEach" -}}
{{- $base := .Files.Get "files/config.yaml" | fromYaml -}}
{{- $values := .Values.config | default dict -}}
{{- $topology := (($values.stores | default dict).topology) | default (($base.stores | default dict).topology) | default "embedded" -}}
{{- if and (eq $topology "embedded") .Values.dataVolume.enabled }}true{{ end -}}
{{- end -}}

{{/* The worker groups rendered: the store group only with the embedded store's data volume. */}}
{{- define "serve-app.workerGroups" -}}
{{- $groups := list "cpu" "dense-gpu" "sparse-gpu" "llm-gpu" -}}
{{- if include "serve-app.storePinned" . }}{{ $groups = append $groups "store" }}{{ end -}}
{{- toYaml $groups -}}
{{- end -}}

{{/*
The Ray resources each group advertises (the group-level `resources` field: KubeRay passes them
to `ray start`, Ray's autoscaler reads them). The head runs no replicas (num-cpus 0 in its
rayStartParams). The CPU count is the container's CPU request, so Ray never schedules more
than the pod got; only dense-gpu offers dense_slot and only sparse-gpu offers sparse_slot, so
the matching deployments land there (and only llm-gpu offers llm_slot, for the LLM). With the embedded store, the store group (one pod, the
only one that mounts the data volume, so ReadWriteOnce suffices) offers data_volume and no CPU:
only the store's replica lands there.
Custom names must survive KubeRay (pod.go, updateRayStartParamsResources): a name whose lower
case is "cpu" or "memory", ends in "gpu" or is an NVIDIA MIG slice becomes --num-cpus,
--memory or --num-gpus, and only the rest reach --resources (tests/helm/kuberay_start.py).
*/}}
{{- define "serve-app.rayResources" -}}
{{- $w := .Values.workerGroups -}}
head: {CPU: "0"}
cpu:
  CPU: {{ $w.cpu.resources.requests.cpu | quote }}
{{- if include "serve-app.storePinned" . }}
store: {CPU: "0", data_volume: "1"}
{{- end }}
dense-gpu:
  CPU: {{ $w.denseGpu.resources.requests.cpu | quote }}
  GPU: {{ $w.denseGpu.gpus | quote }}
  dense_slot: {{ $w.denseGpu.gpus | quote }}
sparse-gpu:
  CPU: {{ $w.sparseGpu.resources.requests.cpu | quote }}
  GPU: {{ $w.sparseGpu.gpus | quote }}
  sparse_slot: {{ $w.sparseGpu.gpus | quote }}
llm-gpu:
  CPU: {{ $w.llmGpu.resources.requests.cpu | quote }}
  GPU: {{ $w.llmGpu.gpus | quote }}
  llm_slot: {{ $w.llmGpu.gpus | quote }}
{{- end -}}

{{/* A Kubernetes CPU quantity ("4", "500m") as a number. */}}
{{- define "serve-app.cpus" -}}
{{- $q := toString . -}}
{{- if hasSuffix "m" $q }}{{ divf (trimSuffix "m" $q | float64) 1000.0 }}{{ else }}{{ $q | float64 }}{{ end -}}
{{- end -}}

{{/*
The model references each Serve deployment loads (mirrors serve_app/model_fetch.py:
model_references; a test compares them): the chunker counts tokens with chunker.tokenizer or
else dense.model's tokenizer, and with semantic_split embeds with the dense model too.
*/}}
{{- define "serve-app.modelReferences" -}}
{{- $chunker := .chunker | default dict -}}
{{- $dense := .dense | default dict -}}
{{- $splade := .splade | default dict -}}
{{- $reranker := .reranker | default dict -}}
{{- $llm := .llm | default dict -}}
chunker:
  - {{ $chunker.tokenizer | default $dense.model | quote }}
  {{- if and $chunker.semantic_split (ne ($chunker.tokenizer | default $dense.model) $dense.model) }}
  - {{ $dense.model | quote }}
  {{- end }}
dense: [{{ $dense.model | quote }}]
{{- if or (not (hasKey $splade "enabled")) $splade.enabled }}
splade: [{{ $splade.model | quote }}]
{{- end }}
{{- if $reranker.enabled }}
reranker: [{{ $reranker.model | quote }}]
{{- end }}
{{- if and $llm.enabled (not (hasPrefix "catalog:" ($llm.model | default ""))) (not (hasPrefix "package:" ($llm.model | default ""))) }}
llm: [{{ $llm.model | quote }}]
{{- end }}
{{- end -}}

{{/*
Which groups mount the model cache and the data volume: a group mounts the cache when a
deployment that loads a model from it can be placed on the group's pods (Ray places a replica
on any pod whose advertised resources cover its CPUs, GPUs and custom resources), and the data
volume when the embedded store's replica can. Read-only for the cache; read-write for data.
*/}}
{{- define "serve-app.groupVolumes" -}}
{{- include "serve-app.once" (list . "serve-app.groupVolumesEach") -}}
{{- end -}}

{{- define "serve-app.groupVolumesEach" -}}
{{- $config := include "serve-app.config" . | fromYaml -}}
{{- $serve := $config.serve | default dict -}}
{{- $root := printf "%s/" (trimSuffix "/" .Values.modelCache.mountPath) -}}
{{- $refs := include "serve-app.modelReferences" $config | fromYaml -}}
{{- $offers := include "serve-app.rayResources" . | fromYaml -}}
{{- $deployments := concat (keys $refs) (list "store" "ingress") | uniq | sortAlpha -}}
{{- range $group := prepend (include "serve-app.workerGroups" . | fromYamlArray) "head" }}
{{- $offer := index $offers $group -}}
{{- $models := false -}}
{{- $data := false -}}
{{- $fitting := list -}}
{{- range $name := $deployments -}}
{{- if include "serve-app.fits" (list (index $serve $name | default dict) $offer) -}}
{{- $fitting = append $fitting $name -}}
{{- range $ref := (index $refs $name | default list) -}}
{{- if and (ne $.Values.modelCache.type "none") (hasPrefix $root $ref) }}{{ $models = true }}{{ end -}}
{{- end -}}
{{- if and (eq $name "store") (include "serve-app.storePinned" $) }}{{ $data = true }}{{ end -}}
{{- end -}}
{{- end }}
{{ $group }}: {models: {{ $models }}, data: {{ $data }}, deployments: {{ $fitting | toJson }}}
{{- end -}}
{{- end -}}

{{/* "true" when one replica with these ray_actor_options fits an empty pod offering these
resources (no group advertises accelerator types: Ray detects them on GPU pods only). */}}
{{- define "serve-app.fits" -}}
{{- $s := index . 0 -}}
{{- $offer := index . 1 -}}
{{- $cpus := 0.5 -}}
{{- if hasKey $s "num_cpus" }}{{ $cpus = $s.num_cpus | float64 }}{{ end -}}
{{- $gpus := $s.num_gpus | default 0 | float64 -}}
{{- $offeredGpus := $offer.GPU | default "0" | float64 -}}
{{- $fits := and (le $cpus (include "serve-app.cpus" $offer.CPU | float64)) (le $gpus $offeredGpus) -}}
{{- if and $s.accelerator_type (eq $offeredGpus 0.0) }}{{ $fits = false }}{{ end -}}
{{- range $key, $amount := ($s.resources | default dict) -}}
{{- if gt ($amount | float64) 0.0 -}}
{{- if lt ((index $offer $key) | default "0" | float64) ($amount | float64) }}{{ $fits = false }}{{ end -}}
{{- end -}}
{{- end -}}
{{- if $fits }}true{{ end -}}
{{- end -}}

{{/*
The references of "serve-app.modelReferences" whose tokenizer (and configuration files) is
all a deployment loads (mirrors serve_app/model_fetch.py:tokenizer_references): the chunker
counts tokens, unless it embeds sentences with that very model; a dense model served by a
vLLM server (dense.backend vllm-http) is only tokenised here.
*/}}
{{- define "serve-app.tokenizerReferences" -}}
{{- $chunker := .chunker | default dict -}}
{{- $dense := .dense | default dict -}}
{{- $tokenizer := $chunker.tokenizer | default $dense.model -}}
{{- if not (and $chunker.semantic_split (eq $tokenizer $dense.model)) }}
chunker: [{{ $tokenizer | quote }}]
{{- end }}
{{- if eq ($dense.backend | default "transformers") "vllm-http" }}
dense: [{{ $dense.model | quote }}]
{{- end }}
{{- end -}}

{{/*
Model reference -> the revision (Hub commit) the configuration pins for it (mirrors
serve_app/model_fetch.py:configured_revisions): <section>.revision; the chunker's tokenizer
chunker.tokenizer_revision, else the dense model's when it is the dense model.
*/}}
{{- define "serve-app.modelRevisions" -}}
{{- $chunker := .chunker | default dict -}}
{{- $dense := .dense | default dict -}}
{{- $pins := list (list ($chunker.tokenizer | default $dense.model) $chunker.tokenizer_revision) (list $dense.model $dense.revision) -}}
{{- $splade := .splade | default dict -}}
{{- if or (not (hasKey $splade "enabled")) $splade.enabled }}{{ $pins = append $pins (list $splade.model $splade.revision) }}{{ end -}}
{{- range $name := list "reranker" "llm" -}}
{{- $section := index $ $name | default dict -}}
{{- if $section.enabled }}{{ $pins = append $pins (list $section.model $section.revision) }}{{ end -}}
{{- end -}}
{{- $revisions := dict -}}
{{- range $pin := $pins -}}
{{- $ref := index $pin 0 | default "" -}}
{{- $revision := index $pin 1 | default "" -}}
{{- if $revision -}}
{{- $known := index $revisions $ref | default $revision -}}
{{- if ne $known $revision -}}
{{- fail (printf "%s is pinned to two revisions (%s and %s): configure one" $ref $known $revision) -}}
{{- end -}}
{{- $_ := set $revisions $ref $revision -}}
{{- end -}}
{{- end -}}
{{- toYaml $revisions -}}
{{- end -}}

{{/*
Model specs the model-fetch Job downloads: modelFetch.models, or the configuration's model
paths under modelCache.mountPath (/models/Qwen/Qwen3-Embedding-8B ->
Qwen/Qwen3-Embedding-8B@<dense.revision>), as serve_app/model_fetch.py:cache_ids derives them
(a test compares them).
*/}}
{{- define "serve-app.fetchModels" -}}
{{- include "serve-app.deploymentFetchModels" (list . (list "chunker" "dense" "splade" "reranker" "llm")) -}}
{{- end -}}

{{/* The model specs the given deployments load from the cache (in first-use order), each
with its configured revision and "tokenizer:" where none of them loads more than its
tokenizer; or the whole modelFetch.models when it is set. Every Hub id must be pinned to a
commit (a tag or a branch moves: a scale-up would load other weights than the index was built
with), except those listed in modelFetch.allowUnpinned. Arguments: (list $ <deployment names>). */}}
{{- define "serve-app.deploymentFetchModels" -}}
{{- $names := index . 1 -}}
{{- with index . 0 -}}
{{- $values := .Values -}}
{{- $ids := list -}}
{{- if $values.modelFetch.models -}}
{{- $ids = $values.modelFetch.models -}}
{{- else -}}
{{- $config := include "serve-app.config" . | fromYaml -}}
{{- $root := printf "%s/" (trimSuffix "/" $values.modelCache.mountPath) -}}
{{- $refs := include "serve-app.modelReferences" $config | fromYaml -}}
{{- $tokenizer := include "serve-app.tokenizerReferences" $config | fromYaml -}}
{{- $revisions := include "serve-app.modelRevisions" $config | fromYaml -}}
{{- $order := list -}}
{{- $whole := dict -}}
{{- $refOf := dict -}}
{{- range $name := list "chunker" "dense" "splade" "reranker" "llm" -}}
{{- if has $name $names -}}
{{- range $ref := (index $refs $name | default list) -}}
{{- if hasPrefix $root $ref -}}
{{- $id := trimPrefix $root $ref -}}
{{- if not (regexMatch "^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$" $id) -}}
{{- fail (printf "modelFetch: %s (%s's model) is under modelCache.mountPath but %q is not a Hub id (owner/name); set modelFetch.models, or modelFetch.enabled=false" $ref $name $id) -}}
{{- end -}}
{{- if not (hasKey $whole $id) -}}
{{- $order = append $order $id -}}
{{- $_ := set $whole $id false -}}
{{- $_ := set $refOf $id $ref -}}
{{- end -}}
{{- if not (has $ref (index $tokenizer $name | default list)) }}{{ $_ := set $whole $id true }}{{ end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $id := $order -}}
{{- $revision := index $revisions (index $refOf $id) | default "" -}}
{{- $spec := printf "%s%s" (ternary "" "tokenizer:" (index $whole $id)) $id -}}
{{- $ids = append $ids (ternary (printf "%s@%s" $spec $revision) $spec (not (empty $revision))) -}}
{{- end -}}
{{- end -}}
{{- range $spec := $ids -}}
{{- $id := regexReplaceAll "@.*$" (trimPrefix "tokenizer:" $spec) "" -}}
{{- $revision := ternary (regexReplaceAll "^[^@]*@" $spec "") "" (contains "@" $spec) -}}
{{- if and (not (regexMatch "^[0-9a-f]{40}$" $revision)) (not (has $id ($values.modelFetch.allowUnpinned | default list))) -}}
{{- fail (printf "modelFetch: %s is not pinned to a commit: set the revision of the configuration's section that loads it (dense.revision, splade.revision, reranker.revision, llm.revision, chunker.tokenizer_revision: 40 hex digits), or write it %s@<commit> in modelFetch.models; modelFetch.allowUnpinned lists ids fetched at the Hub's current revision" $spec $id) -}}
{{- end -}}
{{- end -}}
{{- toYaml ($ids | uniq) -}}
{{- end -}}
{{- end -}}

{{/* The download of a group's pods (its model-fetch init container), in MiB: the sum of
modelFetch.downloadMiB over the specs it fetches (the weights, or "tokenizer" for
tokenizer-only specs); empty when a spec has no entry there. For sizing ephemeral storage.
Arguments: (list $ <group>). */}}
{{- define "serve-app.groupDownloadMiB" -}}
{{- $root := index . 0 -}}
{{- $group := index . 1 -}}
{{- $volumes := index (include "serve-app.groupVolumes" $root | fromYaml) $group | default dict -}}
{{- if $volumes.models -}}
{{- $sizes := $root.Values.modelFetch.downloadMiB | default dict -}}
{{- $total := 0 -}}
{{- $known := true -}}
{{- range $spec := include "serve-app.deploymentFetchModels" (list $root $volumes.deployments) | fromYamlArray -}}
{{- $id := regexReplaceAll "@.*$" (trimPrefix "tokenizer:" $spec) "" -}}
{{- $entry := index $sizes $id | default dict -}}
{{- $part := ternary "tokenizer" "weights" (hasPrefix "tokenizer:" $spec) -}}
{{- if hasKey $entry $part }}{{ $total = add $total (index $entry $part) }}{{ else }}{{ $known = false }}{{ end -}}
{{- end -}}
{{- if $known }}{{ $total }}{{ end -}}
{{- end -}}
{{- end -}}


{{/*
One Serve deployment's options from config.serve.<name>, mirroring
deployments/replicas/options.py:deployment_options (a test compares the two).
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
    encoding: JSON
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
  {{- range $key := list "graceful_shutdown_wait_loop_s" "graceful_shutdown_timeout_s" }}
  {{- if and (hasKey $s $key) (not (kindIs "invalid" (index $s $key))) }}
  {{ $key }}: {{ index $s $key | float64 }}
  {{- end }}
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
{{- $llm := $config.llm | default dict -}}
{{- $connections := (($config.api | default dict).connections | default dict) -}}
http_options:
  {{- /* Serve's default of 90 s let idle kept-alive connections pile up (api.connections) */}}
  keep_alive_timeout_s: {{ $connections.keep_alive_s | default 5 }}
applications:
  - name: {{ $serve.app_name | default "retrieval" }}
    route_prefix: {{ $serve.route_prefix | default "/" }}
    import_path: deployments.builder.graph:build_app
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
      {{- if $llm.enabled }}
      {{- include "serve-app.deploymentOptions" (list "llm" $serve.llm) | nindent 6 }}
      {{- end }}
      {{- include "serve-app.deploymentOptions" (list "store" $serve.store) | nindent 6 }}
      {{- include "serve-app.deploymentOptions" (list "ingress" $serve.ingress) | nindent 6 }}
{{- end -}}

{{/* Environment of a Ray container: Serve switches, offline models, secrets, store
credentials. Arguments: (list $ <group>), group "validate" for the pre-upgrade validate Job
(the same environment, so it checks what the replicas will have); HF_HOME points into the model
cache where the group mounts it (elsewhere the image's default). */}}
{{- define "serve-app.env" -}}
{{- $root := index . 0 -}}
{{- $volumes := dict "models" (include "serve-app.cacheReferenced" $root) -}}
{{- if ne (index . 1) "validate" -}}
{{- $volumes = index (include "serve-app.groupVolumes" $root | fromYaml) (index . 1) -}}
{{- end -}}
{{- with $root -}}
{{- $config := include "serve-app.config" . | fromYaml -}}
{{- /* Ray Serve reads its switches (serve.env: HAProxy, throughput mode) when its processes
start: controller and proxies on the head, proxies and replicas on workers. */}}
{{- range $key, $value := (($config.serve | default dict).env | default dict) }}
- name: {{ $key }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- /* Serve's HAProxy template hardened by the image's .pth hook (deployments/process_hook.py):
a header timeout, a private admin socket, no stats page, X-Forwarded-For set by HAProxy. */}}
- name: SERVE_APP_HAPROXY_HOOK
  value: "1"
- name: SERVE_APP_HEADER_TIMEOUT_S
  value: {{ ((($config.api | default dict).connections | default dict).header_timeout_s | default 5) | toString | quote }}
- name: SERVE_APP_TRUSTED_PROXIES
  value: {{ join "," (($config.api | default dict).trusted_proxies | default list) | quote }}
- name: HF_HUB_OFFLINE
  value: "1"
{{- if $volumes.models }}
- name: HF_HOME
  value: {{ printf "%s/hf" (trimSuffix "/" .Values.modelCache.mountPath) | quote }}
{{- end }}
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
{{- end }}
{{- end -}}

{{/* "true" when a model reference of the configuration lies in the model cache (the
validate Job then mounts it, read-only, as the replicas that load those models do). */}}
{{- define "serve-app.cacheReferenced" -}}
{{- if ne .Values.modelCache.type "none" -}}
{{- $config := include "serve-app.config" . | fromYaml -}}
{{- $root := printf "%s/" (trimSuffix "/" .Values.modelCache.mountPath) -}}
{{- $refs := include "serve-app.modelReferences" $config | fromYaml -}}
{{- $found := false -}}
{{- range $name, $list := $refs }}{{ range $ref := $list }}{{ if hasPrefix $root $ref }}{{ $found = true }}{{ end }}{{ end }}{{ end -}}
{{- if $found }}true{{ end -}}
{{- end -}}
{{- end -}}

{{/* "true" when the validate Job renders: enabled, with a server store topology. With the
embedded store the running store replica holds the shard directory's lock (qdrant-edge's WAL):
a second process cannot open it, so the index cannot be checked from outside before traffic
moves (and that topology upgrades in place, upgradeStrategy None). */}}
{{- define "serve-app.validateJob" -}}
{{- if .Values.validateOnUpgrade.enabled -}}
{{- $config := include "serve-app.config" . | fromYaml -}}
{{- if ne (($config.stores | default dict).topology | default "embedded") "embedded" }}true{{ end -}}
{{- end -}}
{{- end -}}

{{- define "serve-app.modelsClaim" -}}
{{- .Values.modelCache.existingClaim | default (printf "%s-models" (include "serve-app.fullname" .)) -}}
{{- end -}}

{{/* Mounts of a Ray container. Arguments: (list $ <group>). The model cache is read-only
here (the model fetch, Job or init container, is its only writer); the data volume is the
embedded store's. */}}
{{- define "serve-app.volumeMounts" -}}
{{- $root := index . 0 -}}
{{- $volumes := index (include "serve-app.groupVolumes" $root | fromYaml) (index . 1) -}}
- name: dshm
  mountPath: /dev/shm
- name: tmp
  mountPath: /tmp
{{- if $volumes.models }}
- name: models
  mountPath: {{ $root.Values.modelCache.mountPath }}
  readOnly: true
{{- end }}
{{- if $volumes.data }}
- name: data
  mountPath: {{ $root.Values.dataVolume.mountPath }}
{{- end }}
{{- end -}}

{{/* Volumes of a Ray pod. Arguments: (list $ <group>). */}}
{{- define "serve-app.volumes" -}}
{{- $root := index . 0 -}}
{{- $volumes := index (include "serve-app.groupVolumes" $root | fromYaml) (index . 1) -}}
{{- with $root -}}
- name: dshm
  emptyDir: {medium: Memory, sizeLimit: {{ .Values.shm.sizeLimit }}}
- name: tmp
  emptyDir: {sizeLimit: {{ .Values.rayTmp.sizeLimit }}}
{{- if and $volumes.models (eq .Values.modelCache.type "pvc") }}
- name: models
  persistentVolumeClaim:
    claimName: {{ include "serve-app.modelsClaim" . }}
    readOnly: true
{{- else if and $volumes.models (eq .Values.modelCache.type "emptyDir") }}
- name: models
  emptyDir: {sizeLimit: {{ include "serve-app.groupCacheSize" (list . (index $ 1)) }}}
{{- else if $volumes.models }}
- name: models
  hostPath: {path: {{ .Values.modelCache.hostPath }}, type: Directory}
{{- end }}
{{- if $volumes.data }}
- name: data
  persistentVolumeClaim:
    claimName: {{ printf "%s-data" (include "serve-app.fullname" .) }}
{{- end }}
{{- end }}
{{- end -}}

{{/* One Ray container. Arguments: (list $ "ray-head"|"ray-worker" resources gpus group) */}}
{{- define "serve-app.container" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $resources := index . 2 -}}
{{- $gpus := index . 3 -}}
{{- $group := index . 4 -}}
- name: {{ $name }}
  image: {{ include "serve-app.image" $root }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  env:
    {{- include "serve-app.env" (list $root $group) | nindent 4 }}
    # On SIGTERM, `ray start --block` (the container's main process) first drains its node
    # through the GCS for up to this long (Ray >= 2.60): Serve starts the node's replicas
    # elsewhere and stops these gracefully, so requests in flight finish and new ones go to
    # the replacements; the node stops once idle. Ray's default, 30 s, would cut an upload.
    # The grace period less 30 s, so Ray's own teardown runs before the kubelet's SIGKILL.
    - name: RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S
      value: {{ sub (include "serve-app.terminationGracePeriodSeconds" $root | int) 30 | quote }}
    # Ray's log files under /tmp, rotated (rayTmp): the emptyDir's sizeLimit is the hard bound.
    - name: RAY_ROTATION_MAX_BYTES
      value: {{ $root.Values.rayTmp.logRotationBytes | int64 | quote }}
    - name: RAY_ROTATION_BACKUP_COUNT
      value: {{ $root.Values.rayTmp.logRotationBackups | quote }}
  ports:
    - {containerPort: 8000, name: serve}
    - {containerPort: 8080, name: metrics}
  {{- if eq $name "ray-head" }}
    - {containerPort: 6379, name: gcs}
    - {containerPort: 8265, name: dashboard}
    - {containerPort: 10001, name: client}
    # The head's other exporters (Ray's AUTOSCALER_METRIC_PORT and DASHBOARD_METRIC_PORT):
    # the autoscaler's decisions and the dashboard's own health, scraped by the PodMonitor.
    - {containerPort: 44217, name: as-metrics}
    - {containerPort: 44227, name: dash-metrics}
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
    {{- include "serve-app.volumeMounts" (list $root $group) | nindent 4 }}
{{- end -}}

{{/* initializingTimeout as KubeRay accepts it (a positive Go duration or whole seconds; its
validation refuses zero), "" when off. */}}
{{- define "serve-app.initializingTimeout" -}}
{{- $t := "" -}}
{{- if not (kindIs "invalid" .Values.initializingTimeout) }}{{ $t = toString .Values.initializingTimeout }}{{ end -}}
{{- if and $t (not (regexMatch "[1-9]" $t)) -}}
{{- fail (printf "initializingTimeout %q: KubeRay needs a positive duration (\"1h\", \"45m\") or seconds; \"\" turns the timeout off" $t) -}}
{{- end -}}
{{- $t -}}
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

{{/* gcsFaultToleranceOptions from gcsFaultTolerance values (empty when off). A fixed
externalStorageNamespace with NewCluster upgrades would give the old and the new RayCluster the
same Redis keys (the new head restores the old cluster's actors, and the old cluster's Redis
cleanup Job deletes the keys the new one uses): refused. */}}
{{- define "serve-app.gcsFaultTolerance" -}}
{{- $ft := .Values.gcsFaultTolerance -}}
{{- if $ft.enabled -}}
{{- if and $ft.externalStorageNamespace (eq (include "serve-app.upgradeStrategy" .) "NewCluster") -}}
{{- fail "gcsFaultTolerance.externalStorageNamespace with upgradeStrategy NewCluster: the old and the new RayCluster of an upgrade would share one Redis namespace (and the old one's cleanup Job deletes it); leave it empty (KubeRay uses each RayCluster's UID)" -}}
{{- end -}}
redisAddress: {{ $ft.redisAddress | quote }}
{{- with $ft.redisPasswordSecret }}{{ if .name }}
redisPassword:
  valueFrom:
    secretKeyRef: {name: {{ .name | quote }}, key: {{ .key | quote }}}
{{- end }}{{ end }}
{{- with $ft.externalStorageNamespace }}
externalStorageNamespace: {{ . | quote }}
{{- end }}
{{- end -}}
{{- end -}}

{{/* The head's disruption budget: podDisruptionBudget.headMaxUnavailable when set, else 1: a
drain may take the head. With GCS fault tolerance the replicas keep serving while KubeRay
replaces it; without, every replica restarts, but a budget of 0 over the one head pod would
block every drain of its node for good (EKS node-group updates fail, Karpenter stalls, GKE
force-evicts after an hour), so 0 is the operator's explicit choice, and NOTES says what it
costs. */}}
{{- define "serve-app.headMaxUnavailable" -}}
{{- $set := .Values.podDisruptionBudget.headMaxUnavailable -}}
{{- if kindIs "invalid" $set -}}
1
{{- else -}}
{{- $set -}}
{{- end -}}
{{- end -}}

{{/* Ingress annotations: for ingress-nginx, limits sized to the API's own (its defaults, a
1 MiB body and 60 s timeouts, would cut off uploads the API accepts), then the values'
annotations, which win. The proxy waits 30 s past the API's longest deadline, so a client
gets the API's own 504 rather than the proxy's; request buffering is off so an upload
streams to the API, which authenticates and counts bytes before reading the body. */}}
{{- define "serve-app.ingressAnnotations" -}}
{{- $config := include "serve-app.config" . | fromYaml -}}
{{- $api := $config.api | default dict -}}
{{- $answer := $config.answer | default dict -}}
{{- $answerDeadlines := $answer.deadlines | default dict -}}
{{- $out := dict -}}
{{- $deadline := max (int ($api.ingest_timeout_s | default 900)) (int ($api.request_timeout_s | default 30)) (int ($answerDeadlines.total_s | default 180)) -}}
{{- if contains "alb" (.Values.ingress.className | default "") -}}
{{- /* ALB's idle timeout (60 s by default) cuts a stream between answer heartbeats otherwise */ -}}
{{- $_ := set $out "alb.ingress.kubernetes.io/load-balancer-attributes" (printf "idle_timeout.timeout_seconds=%d" (add $deadline 30)) -}}
{{- end -}}
{{- if contains "nginx" (.Values.ingress.className | default "") -}}
{{- $_ := set $out "nginx.ingress.kubernetes.io/proxy-body-size" (printf "%d" (int64 ($api.max_request_bytes | default 50000000))) -}}
{{- $_ := set $out "nginx.ingress.kubernetes.io/proxy-read-timeout" (printf "%d" (add $deadline 30)) -}}
{{- $_ := set $out "nginx.ingress.kubernetes.io/proxy-send-timeout" (printf "%d" (add $deadline 30)) -}}
{{- $_ := set $out "nginx.ingress.kubernetes.io/proxy-request-buffering" "off" -}}
{{- $_ := set $out "nginx.ingress.kubernetes.io/proxy-buffering" "off" -}}
{{- end -}}
{{- $out = mergeOverwrite $out (.Values.ingress.annotations | default dict) -}}
{{- if $out }}{{ toYaml $out }}{{ end -}}
{{- end -}}

{{/* "true" when the model-fetch Job renders: enabled, with ids to fetch, into a claim. With
modelCache.type emptyDir each pod that mounts the cache fetches into its own instead
("serve-app.fetchInit"). */}}
{{- define "serve-app.fetchJob" -}}
{{- $type := .Values.modelCache.type -}}
{{- if and (eq $type "emptyDir") (not .Values.modelFetch.enabled) -}}
{{- fail "modelCache.type emptyDir: each pod's cache starts empty and only the model fetch fills it; keep modelFetch.enabled, or use modelCache.type pvc / hostPath for a cache you fill yourself" -}}
{{- end -}}
{{- if .Values.modelFetch.enabled -}}
{{- if not (has $type (list "pvc" "emptyDir")) -}}
{{- $why := ternary "no cache to fetch into" "a node directory you fill yourself" (eq $type "none") -}}
{{- fail (printf "modelFetch.enabled needs modelCache.type emptyDir or pvc (a cache the fetch can write); with modelCache.type %s (%s) set modelFetch.enabled=false" $type $why) -}}
{{- end -}}
{{- if and (eq $type "pvc") (include "serve-app.fetchModels" . | fromYamlArray) }}true{{ end -}}
{{- end -}}
{{- end -}}

{{/* The model fetch (serve_app/model_fetch.py) as a container, the same in the model-fetch Job
(modelCache.type pvc) and in the init container of each pod with its own cache (emptyDir): it
downloads, so the image's HF_HUB_OFFLINE=1 (the replicas' setting) is turned off here, and
TRANSFORMERS_OFFLINE with it (huggingface_hub honours both); HF_HOME (the token file, Xet's and
the Hub client's own caches) goes to /tmp, the weights to the cache. Arguments:
(list $ <ids> <resources>). */}}
{{- define "serve-app.fetchContainer" -}}
{{- $root := index . 0 -}}
{{- $ids := index . 1 -}}
{{- $resources := index . 2 -}}
{{- with $root -}}
{{- $f := .Values.modelFetch -}}
- name: model-fetch
  image: {{ include "serve-app.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: [python, -m, serve_app.model_fetch]
  args:
    - --cache
    - {{ .Values.modelCache.mountPath | quote }}
    - --token-source
    - {{ ternary (printf "Secret %s, key %s: modelFetch.hfTokenSecret" $f.hfTokenSecret.name $f.hfTokenSecret.key) "no Secret named: modelFetch.hfTokenSecret.name" (not (empty $f.hfTokenSecret.name)) | quote }}
    - --keep-revisions
    - {{ $f.keepRevisions | quote }}
    {{- range $ids }}
    - {{ . | quote }}
    {{- end }}
  env:
    - name: HF_HUB_OFFLINE
      value: "0"
    - name: TRANSFORMERS_OFFLINE
      value: "0"
    - name: HF_HOME
      value: /tmp/hf
    - name: HF_HUB_DISABLE_TELEMETRY
      value: "1"
    {{- with $f.hfTokenSecret.name }}
    - name: HF_TOKEN
      valueFrom:
        secretKeyRef:
          name: {{ . }}
          key: {{ $f.hfTokenSecret.key }}
          optional: true      # no Secret: anonymous; a gated model then fails naming it
    {{- end }}
  resources:
    {{- toYaml $resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.containerSecurityContext | nindent 4 }}
  volumeMounts:
    - name: models
      mountPath: {{ .Values.modelCache.mountPath }}
    - name: tmp
      mountPath: /tmp
{{- end -}}
{{- end -}}

{{/* The init containers of a pod with its own model cache (modelCache.type emptyDir): the model
fetch of the models its group's deployments load, before Ray starts. The pod's scheduling asks
for the cache's size of node disk (an init container's request is the pod's when larger).
Arguments: (list $ <group>, or "validate" for the validate Job: every model of the cache). */}}
{{- define "serve-app.fetchInit" -}}
{{- $root := index . 0 -}}
{{- $group := index . 1 -}}
{{- if and (eq $root.Values.modelCache.type "emptyDir") $root.Values.modelFetch.enabled -}}
{{- $ids := list -}}
{{- if eq $group "validate" -}}
{{- if include "serve-app.cacheReferenced" $root }}{{ $ids = include "serve-app.fetchModels" $root | fromYamlArray }}{{ end -}}
{{- else -}}
{{- $volumes := index (include "serve-app.groupVolumes" $root | fromYaml) $group -}}
{{- if $volumes.models -}}
{{- $ids = include "serve-app.deploymentFetchModels" (list $root $volumes.deployments) | fromYamlArray -}}
{{- end -}}
{{- end -}}
{{- if $ids -}}
{{- $resources := deepCopy $root.Values.modelFetch.resources -}}
{{- $requests := merge (dict "ephemeral-storage" (include "serve-app.groupCacheSize" (list $root $group))) ($resources.requests | default dict) -}}
{{- $_ := set $resources "requests" $requests -}}
{{- include "serve-app.fetchContainer" (list $root $ids $resources) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The worker groups whose pods fetch models themselves (a NetworkPolicy lets them reach the
Hub). */}}
{{- define "serve-app.fetchingGroups" -}}
{{- $groups := list -}}
{{- range $group := include "serve-app.workerGroups" . | fromYamlArray -}}
{{- if include "serve-app.fetchInit" (list $ $group) }}{{ $groups = append $groups $group }}{{ end -}}
{{- end -}}
{{- toYaml $groups -}}
{{- end -}}

{{/* The upgrade guard's refusal (deployments/upgrade_guard.py, run by the hook Job of
templates/upgrade-guard.yaml): an upgrade or rollback of a running RayService whose Ray pods
would change, under upgradeStrategy None (the embedded store). KubeRay v1.7.0 neither updates
nor replaces its RayCluster then (shouldUpdateCluster / shouldPrepareNewCluster: only appended
worker groups or a new KubeRay version are applied), and submits only the new serveConfigV2 to
the old pods. The message names the procedure that replaces the cluster. */}}
{{- define "serve-app.upgradeRefusal" -}}
{{- $name := include "serve-app.fullname" . -}}
{{- $claim := ternary (printf " (the claim %s-data is kept: it is the chart's, with helm.sh/resource-policy keep, not the cluster's)" $name) "" (not (empty (include "serve-app.storePinned" .))) -}}
{{- printf "it changes the Ray pods (image, environment, resources, volumes or another part of rayClusterConfig) of RayService %s, and under upgradeStrategy None (the embedded store) KubeRay v1.7.0 keeps the running pods as they are (it only submits the new serveConfigV2 to them). Replace the cluster: `kubectl -n %s delete rayservice %s --cascade=foreground`, then `kubectl -n %s wait --for=delete pod --timeout=20m -l app.kubernetes.io/name=%s,app.kubernetes.io/instance=%s` (KubeRay deletes its RayCluster in the background, so the delete can return while the old pods still terminate%s), then run this helm upgrade (or rollback) again. The service is down from the delete until the new cluster is ready (pods scheduled, image pulled, models fetched and loaded; initializingTimeout applies). A server store topology (opensearch+qdrant) upgrades with NewCluster instead, without downtime. See docs/kubernetes.md, \"Upgrades\"" $name .Release.Namespace $name .Release.Namespace (include "serve-app.name" .) .Release.Name $claim -}}
{{- end -}}

{{/* The hash of the Ray cluster spec as KubeRay v1.7.0 decides upgrades by it
(GenerateHashWithoutReplicasAndWorkersToDelete over rayClusterSpecForHashing): rayClusterConfig
as data, canonical JSON (comments, key order and layout do not count), less suspend and the
fields KubeRay mutes: each worker group's replicas, minReplicas, maxReplicas and
scaleStrategy.workersToDelete, every pod template's tolerations and schedulingGates, and
upgradeStrategy. Arguments: (list $ muted): with muted false, nothing is left out. */}}
{{- define "serve-app.clusterSpecHashEach" -}}
{{- $spec := include "serve-app.rayClusterConfig" (index . 0) | fromYaml -}}
{{- $_ := unset $spec "suspend" -}}
{{- if index . 1 -}}
{{- $_ := unset $spec "upgradeStrategy" -}}
{{- $pods := list $spec.headGroupSpec.template.spec -}}
{{- range $group := $spec.workerGroupSpecs | default list -}}
{{- range $field := list "replicas" "minReplicas" "maxReplicas" }}{{ $_ := unset $group $field }}{{ end -}}
{{- with $group.scaleStrategy }}{{ $_ := unset . "workersToDelete" }}{{ end -}}
{{- $pods = append $pods $group.template.spec -}}
{{- end -}}
{{- range $pod := $pods }}{{ $_ := unset $pod "tolerations" }}{{ $_ := unset $pod "schedulingGates" }}{{ end -}}
{{- end -}}
{{- toJson $spec | sha256sum -}}
{{- end -}}

{{- define "serve-app.clusterSpecHashMuted" }}{{ include "serve-app.clusterSpecHashEach" (list . true) }}{{ end -}}
{{- define "serve-app.clusterSpecHashFull" }}{{ include "serve-app.clusterSpecHashEach" (list . false) }}{{ end -}}
{{/* Each hash and the cluster spec itself computed once per render: the RayService's
annotations and the upgrade guard's Job both carry them. */}}
{{- define "serve-app.clusterSpecHash" -}}
{{- include "serve-app.once" (list (index . 0) (ternary "serve-app.clusterSpecHashMuted" "serve-app.clusterSpecHashFull" (index . 1))) -}}
{{- end -}}
{{- define "serve-app.rayClusterConfig" -}}
{{- include "serve-app.once" (list . "serve-app.rayClusterConfigEach") -}}
{{- end -}}

{{/* What this render changes in the running RayService's cluster spec (found with `lookup`)
that KubeRay v1.7.0 leaves out of its hash, so that it applies none of it to the running
cluster (no new cluster, no update in place): a warning, never a refusal. Empty when nothing
runs, when lookup is empty (helm template, Argo CD), or when nothing such changes. */}}
{{- define "serve-app.ignoredByKubeRay" -}}
{{- $running := lookup "ray.io/v1" "RayService" .Release.Namespace (include "serve-app.fullname" .) -}}
{{- if $running -}}
{{- $annotations := ($running.metadata | default dict).annotations | default dict -}}
{{- $was := index $annotations "serve-app/cluster-spec-sha256" | default "" -}}
{{- $wasFull := index $annotations "serve-app/cluster-spec-full-sha256" | default "" -}}
{{- if and $wasFull (eq $was (include "serve-app.clusterSpecHash" (list . true))) (ne $wasFull (include "serve-app.clusterSpecHash" (list . false))) -}}
this upgrade changes only fields of the Ray cluster that KubeRay v1.7.0 leaves out of its hash (a worker group's replicas, minReplicas, maxReplicas or workersToDelete, a pod's tolerations or scheduling gates, the upgrade strategy): KubeRay applies none of them to the running cluster, and no new cluster starts. To apply them, make a change that starts a new cluster (server stores) or replace the cluster (docs/kubernetes.md, "Upgrades")
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The llm-gpu group's values. Without the LLM (config llm.enabled false) no deployment asks
for llm_slot: the group keeps no pod (replicas and minReplicas 0), so no GPU node idles for it. */}}
{{- define "serve-app.llmGroup" -}}
{{- $group := deepCopy .Values.workerGroups.llmGpu -}}
{{- $config := include "serve-app.config" . | fromYaml -}}
{{- if not (($config.llm | default dict).enabled) -}}
{{- $_ := set $group "replicas" 0 -}}
{{- $_ := set $group "minReplicas" 0 -}}
{{- end -}}
{{- toYaml $group -}}
{{- end -}}

{{/* The Ray pods' terminationGracePeriodSeconds: a stopping pod may hold an upload for the
longest deadline the API gives one (api.ingest_timeout_s, or request_timeout_s if longer) after
Ray's direct-ingress draining window (the ingress' graceful_shutdown_timeout_s already spans
both; whichever is longer counts), plus RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S's 30 s
for Ray's own stop. Read from the configuration the chart renders. */}}
{{- define "serve-app.terminationGracePeriodSeconds" -}}
{{- $config := include "serve-app.config" . | fromYaml -}}
{{- $api := $config.api | default dict -}}
{{- $ingress := (($config.serve | default dict).ingress | default dict) -}}
{{- $deadline := max (ceil ($api.ingest_timeout_s | default 900)) (ceil ($api.request_timeout_s | default 30)) -}}
{{- $drain := max (ceil ($ingress.graceful_shutdown_timeout_s | default 0)) (add 30 $deadline) -}}
{{- add $drain 30 -}}
{{- end -}}

{{/* The StorageClass of a claim the chart creates (list $ "dataVolume" | "modelCache"). Never the
cluster's default: EKS 1.30+ and many clusters have none, and the claim would stay Pending (the
RayService failing after initializingTimeout). Empty: the render fails, naming the value. */}}
{{- define "serve-app.storageClass" -}}
{{- $root := index . 0 -}}
{{- $key := index . 1 -}}
{{- $class := (index $root.Values $key).storageClass | default "" -}}
{{- if not $class -}}
{{- $why := ternary "the embedded store's data volume, ReadWriteOnce" "the shared model cache, ReadWriteMany" (eq $key "dataVolume") -}}
{{- fail (printf "%s.storageClass is empty: the chart does not rely on a default StorageClass (EKS 1.30+ ships none; the claim would stay Pending and the RayService fail after initializingTimeout). Name the class for %s: --set %s.storageClass=<class> (`kubectl get storageclass`; EKS: gp3 of the EBS CSI driver, GKE: standard-rwo, AKS: managed-csi%s)" $key $why $key (ternary "" "; ReadWriteMany: EFS, Filestore, Azure Files, or modelCache.existingClaim" (eq $key "dataVolume"))) -}}
{{- end -}}
{{- $class -}}
{{- end -}}

{{/* KubeRay's authOptions (token mode, Ray >= 2.52; KubeRay v1.7.0 refuses its Kubernetes-token
variant for a RayService): with rayAuth.existingSecret the Secret you created (key auth_token),
else none named, and KubeRay generates one Secret per RayCluster (named after it, owned by it),
so nothing random is rendered (GitOps-safe). Empty when rayAuth.enabled is false. */}}
{{- define "serve-app.authOptions" -}}
{{- if .Values.rayAuth.enabled -}}
mode: token
{{- with .Values.rayAuth.existingSecret }}
secretName: {{ . | quote }}
{{- end }}
{{- end -}}
{{- end -}}

{{/* The node disk a pod's own model cache (modelCache.type emptyDir) takes: the group's download
("serve-app.groupDownloadMiB") plus modelCache.emptyDir.headroomPercent, in whole GiB; the
emptyDir's sizeLimit and the init container's ephemeral-storage request. A group whose download
is not known, and the validate Job: modelCache.emptyDir.sizeLimit. Arguments: (list $ <group>). */}}
{{- define "serve-app.groupCacheSize" -}}
{{- $root := index . 0 -}}
{{- $group := index . 1 -}}
{{- $mib := "" -}}
{{- if ne $group "validate" }}{{ $mib = include "serve-app.groupDownloadMiB" (list $root $group) }}{{ end -}}
{{- if $mib -}}
{{- $percent := add 100 ($root.Values.modelCache.emptyDir.headroomPercent | default 0) -}}
{{- printf "%dGi" (div (add (mul ($mib | int) $percent) 102399) 102400) -}}
{{- else -}}
{{- $root.Values.modelCache.emptyDir.sizeLimit -}}
{{- end -}}
{{- end -}}
