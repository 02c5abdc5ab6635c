{{/* The release's name for its objects (63 characters at most). */}}
{{- define "chatterbox.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "chatterbox.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "chatterbox.labels" -}}
{{ include "chatterbox.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The voices claim: the existing one, or the chart's. */}}
{{- define "chatterbox.voicesClaim" -}}
{{- .Values.voices.existingClaim | default (printf "%s-voices" (include "chatterbox.fullname" .)) -}}
{{- end -}}

{{/*
The pod's grace after SIGTERM: the preStop pause, then the server's drain (its --timeout plus
the 5 s it gives open connections, plus 2 s for connections accepted meanwhile), and a margin.
*/}}
{{- define "chatterbox.terminationGrace" -}}
{{- add (int .Values.preStopSleepSeconds) (int .Values.server.timeout) 5 2 8 -}}
{{- end -}}
