{{/* The chart's name, and the release's full name: its objects' names. */}}
{{- define "walstream.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "walstream.fullname" -}}
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

{{/*
The selector: name and instance, as the first release had them, since a
Deployment's selector cannot change in an upgrade.
*/}}
{{- define "walstream.selectorLabels" -}}
app.kubernetes.io/name: {{ include "walstream.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The recommended labels of walstream's pods. */}}
{{- define "walstream.podLabels" -}}
{{ include "walstream.selectorLabels" . }}
{{ include "walstream.commonLabels" . }}
app.kubernetes.io/component: stream
{{- end -}}

{{/* Every object's: its pods' labels and the chart's. */}}
{{- define "walstream.labels" -}}
{{ include "walstream.podLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The labels that say which release and version, whatever the component. */}}
{{- define "walstream.commonLabels" -}}
app.kubernetes.io/version: {{ include "walstream.tag" . | trunc 63 | quote }}
app.kubernetes.io/part-of: walstream
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "walstream.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "walstream.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "walstream.tag" -}}
{{- default .Chart.AppVersion .Values.image.tag -}}
{{- end -}}

{{- define "walstream.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (include "walstream.tag" .) -}}
{{- end -}}
{{- end -}}

{{/*
The settings the chart's postgres and kafka values make, as a YAML
mapping of walstream's flag names; secrets are files under
/etc/walstream/secrets, TLS material under /etc/walstream/*-tls. A
setting that is also in config fails the rendering: one place for each.
*/}}
{{- define "walstream.settings" -}}
{{- $s := dict -}}
{{- $pg := .Values.postgres -}}
{{- $k := .Values.kafka -}}
{{- with $pg.url }}{{ $_ := set $s "pg-url" . }}{{ end -}}
{{- if $pg.passwordSecret.name }}{{ $_ := set $s "pg-password-file" "/etc/walstream/secrets/pg-password" }}{{ end -}}
{{- with $k.brokers }}{{ $_ := set $s "kafka-brokers" (join "," .) }}{{ end -}}
{{- $tls := include "walstream.kafkaTLS" . | fromYaml -}}
{{- if $k.tls.enabled -}}
{{- $_ := set $s "kafka-tls" true -}}
{{- if $tls.ca }}{{ $_ := set $s "kafka-tls-ca-file" "/etc/walstream/kafka-tls/ca.crt" }}{{ end -}}
{{- if $tls.client -}}
{{- $_ := set $s "kafka-tls-cert-file" "/etc/walstream/kafka-tls/client.crt" -}}
{{- $_ := set $s "kafka-tls-key-file" "/etc/walstream/kafka-tls/client.key" -}}
{{- end -}}
{{- with $k.tls.serverName }}{{ $_ := set $s "kafka-tls-server-name" . }}{{ end -}}
{{- end -}}
{{- with $k.sasl.mechanism }}{{ $_ := set $s "kafka-sasl-mechanism" . }}{{ end -}}
{{- with $k.sasl.user }}{{ $_ := set $s "kafka-sasl-user" . }}{{ end -}}
{{- if $k.sasl.passwordSecret.name }}{{ $_ := set $s "kafka-sasl-password-file" "/etc/walstream/secrets/kafka-sasl-password" }}{{ end -}}
{{- with $k.oauth.tokenURL }}{{ $_ := set $s "kafka-oauth-token-url" . }}{{ end -}}
{{- with $k.oauth.clientID }}{{ $_ := set $s "kafka-oauth-client-id" . }}{{ end -}}
{{- with $k.oauth.scope }}{{ $_ := set $s "kafka-oauth-scope" . }}{{ end -}}
{{- if $k.oauth.clientSecretSecret.name }}{{ $_ := set $s "kafka-oauth-client-secret-file" "/etc/walstream/secrets/kafka-oauth-client-secret" }}{{ end -}}
{{- range $key, $_ := $s -}}
{{- if hasKey $.Values.config $key -}}
{{- fail (printf "%s is set both by the chart's postgres or kafka values and in config: set it in one place" $key) -}}
{{- end -}}
{{- end -}}
{{- toYaml $s -}}
{{- end -}}

{{/*
The Secrets of Kafka's TLS, as YAML: ca {name, key}, the CA that signs the
brokers' certificates, and client {name, certKey, keyKey}, the client
certificate for mutual TLS; each left out when not given. Strimzi keeps
them in two Secrets (the cluster CA's, and the KafkaUser's, whose own
ca.crt is the clients CA), hence caSecret and clientSecret. The older
kafka.tls.secret named one Secret for all three: it is read as both.
*/}}
{{- define "walstream.kafkaTLS" -}}
{{- $t := .Values.kafka.tls -}}
{{- $ca := dig "caSecret" "name" "" $t -}}
{{- $client := dig "clientSecret" "name" "" $t -}}
{{- $out := dict -}}
{{- if $t.secret -}}
{{- if or $ca $client -}}
{{- fail "kafka.tls.secret is the older form of kafka.tls.caSecret and kafka.tls.clientSecret: set those alone" -}}
{{- end -}}
{{- $caKey := hasKey $t "caKey" | ternary $t.caKey "ca.crt" -}}
{{- with $caKey }}{{ $_ := set $out "ca" (dict "name" $t.secret "key" .) }}{{ end -}}
{{- if and $t.certKey $t.keyKey -}}
{{- $_ := set $out "client" (dict "name" $t.secret "certKey" $t.certKey "keyKey" $t.keyKey) -}}
{{- else if or $t.certKey $t.keyKey -}}
{{- fail "kafka.tls.certKey and kafka.tls.keyKey: set both for mutual TLS, or neither" -}}
{{- end -}}
{{- else -}}
{{- if $ca }}{{ $_ := set $out "ca" $t.caSecret }}{{ end -}}
{{- if $client }}{{ $_ := set $out "client" $t.clientSecret }}{{ end -}}
{{- end -}}
{{- if not $t.enabled -}}
{{- $named := "" -}}
{{- if $t.secret }}{{ $named = "kafka.tls.secret" }}{{ else if $ca }}{{ $named = "kafka.tls.caSecret.name" }}{{ else if $client }}{{ $named = "kafka.tls.clientSecret.name" }}{{ end -}}
{{- with $named }}{{ fail (printf "%s is set but kafka.tls.enabled is not: set kafka.tls.enabled=true" .) }}{{ end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/*
Where --config reads from: walstream.yaml rendered from config, a pasted
connector config, or a key of an existing ConfigMap.
*/}}
{{- define "walstream.configKey" -}}
{{- if .Values.existingConfigMap.name -}}
{{- .Values.existingConfigMap.key -}}
{{- else if .Values.connector.config -}}
{{- $ext := dict "json" "json" "properties" "properties" "yaml" "yaml" -}}
{{- if not (hasKey $ext .Values.connector.format) -}}
{{- fail (printf "connector.format %q: want json, properties or yaml" .Values.connector.format) -}}
{{- end -}}
{{- printf "connector.%s" .Values.connector.format -}}
{{- else -}}
walstream.yaml
{{- end -}}
{{- end -}}

{{/*
GOMEMLIMIT: goMemLimit, or goMemLimitPercent of the memory limit in MiB,
rounded down; empty without either.
*/}}
{{- define "walstream.goMemLimit" -}}
{{- $limits := .Values.resources.limits | default dict -}}
{{- if .Values.goMemLimit -}}
{{- .Values.goMemLimit -}}
{{- else if and $limits.memory .Values.goMemLimitPercent -}}
{{- $q := toString $limits.memory -}}
{{- $units := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 -}}
{{- $n := regexFind "^[0-9]+(\\.[0-9]+)?" $q -}}
{{- $unit := trimPrefix $n $q -}}
{{- if or (not $n) (not (hasKey $units $unit)) -}}
{{- fail (printf "resources.limits.memory %q: want a quantity like 512Mi or 1Gi to derive GOMEMLIMIT from, or set goMemLimit" $q) -}}
{{- end -}}
{{- $bytes := mulf (float64 $n) (index $units $unit) -}}
{{- printf "%dMiB" (int64 (floor (divf (mulf $bytes .Values.goMemLimitPercent) 104857600.0))) -}}
{{- end -}}
{{- end -}}

{{/*
The pods: replicaCount, or 3 for a fleet (a streams: list in config,
which its pods share) and 2 for one stream (it and its standby).
*/}}
{{- define "walstream.replicas" -}}
{{- if kindIs "invalid" .Values.replicaCount -}}
{{- eq (include "walstream.fleet" .) "true" | ternary 3 2 -}}
{{- else -}}
{{- .Values.replicaCount -}}
{{- end -}}
{{- end -}}

{{/* "true" when config holds a streams: list: its pods are a fleet. */}}
{{- define "walstream.fleet" -}}
{{- and (not .Values.existingConfigMap.name) (not .Values.connector.config) (kindIs "slice" .Values.config.streams) -}}
{{- end -}}
