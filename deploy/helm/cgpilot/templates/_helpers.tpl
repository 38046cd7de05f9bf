{{/* Labels of every object: the same as the kustomize base's, plus Helm's own. */}}
{{- define "cgpilot.labels" -}}
app.kubernetes.io/name: cgpilot-agent
app.kubernetes.io/part-of: cgpilot
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The pods' labels; the DaemonSet selects on the first only. */}}
{{- define "cgpilot.podLabels" -}}
app.kubernetes.io/name: cgpilot-agent
app.kubernetes.io/part-of: cgpilot
{{- end -}}

{{/* The agent's config file: the values, with the release's namespace always ignored. */}}
{{- define "cgpilot.config" -}}
{{- $c := deepCopy .Values.config -}}
{{- $_ := set $c "ignoredNamespaces" (append (default (list) $c.ignoredNamespaces) .Release.Namespace | uniq) -}}
{{- toYaml $c -}}
{{- end -}}

{{/* A volume name for a path below /sys/fs/cgroup: cpu/kubepods -> cgroup-cpu-kubepods, kubepods.slice -> cgroup-kubepods-slice. */}}
{{- define "cgpilot.cgroupVolume" -}}
{{- printf "cgroup-%s" (regexReplaceAll "[^a-z0-9]+" (lower .) "-" | trimAll "-") | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of the aggregator's objects. */}}
{{- define "cgpilot.aggregatorLabels" -}}
app.kubernetes.io/name: cgpilot-aggregator
app.kubernetes.io/part-of: cgpilot
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Labels of the descheduler's objects. */}}
{{- define "cgpilot.deschedulerLabels" -}}
app.kubernetes.io/name: cgpilot-descheduler
app.kubernetes.io/part-of: cgpilot
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}
