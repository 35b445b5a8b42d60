{{/* The release's name, shortened for Kubernetes names. */}}
{{- define "skillgate.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "skillgate.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "skillgate.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The Secret holding DATABASE_URL and the other secret variables. */}}
{{- define "skillgate.secretName" -}}
{{- default (include "skillgate.fullname" .) .Values.secrets.existingSecret -}}
{{- end -}}

{{- define "skillgate.storeSecretName" -}}
{{- default (include "skillgate.secretName" .) .Values.store.existingSecret -}}
{{- end -}}

{{/* Environment shared by the replicas and the migration Job. */}}
{{- define "skillgate.env" -}}
- name: SKILLGATE_STORE
  valueFrom:
    secretKeyRef:
      name: {{ include "skillgate.storeSecretName" . }}
      key: DATABASE_URL
{{- range $name, $value := .Values.env }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end -}}
