{{- /* Stand-in for issue 46b's "serve-app.groupDownloadMiB" (same name, arguments and result;
that branch defines it in _helpers.tpl beside the per-group fetch): keep one definition when
both are merged, theirs. */ -}}
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
