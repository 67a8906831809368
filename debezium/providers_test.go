package debezium

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// readNamed reads body as the connector config name.
func readNamed(t *testing.T, name, body string) *Connector {
	t.Helper()
	c, ok, err := ReadConnector(filepath.Join(t.TempDir(), name), []byte(body))
	if err != nil || !ok {
		t.Fatalf("reading %s: %v, a connector config: %v", name, err, ok)
	}
	return c
}

// resolved reads body as the connector config name and resolves its
// values, with env as what its config providers read.
func resolved(t *testing.T, name, body string, env ProviderEnv) (map[string]string, error) {
	t.Helper()
	values, _, err := readNamed(t, name, body).Resolve(env, ResolveAll, nil)
	return values, err
}

// connectorWith is a minimal connector config, as properties, whose
// database.user and database.password are user and password.
func connectorWith(user, password string, more ...string) string {
	return strings.Join(append([]string{"connector.class=" + PostgresConnector,
		"database.hostname=db", "database.dbname=app", "database.user=" + user, "database.password=" + password,
		"topic.prefix=dbz", "table.include.list=public.outbox", "transforms=outbox", "transforms.outbox.type=io.debezium.transforms.outbox.EventRouter",
		"key.converter=org.apache.kafka.connect.storage.StringConverter", "value.converter=org.apache.kafka.connect.storage.StringConverter"}, more...), "\n")
}

// db are database.* values, by their keys less the prefix.
type db map[string]string

// wantDB checks the database.* values a resolution gave.
func wantDB(t *testing.T, values map[string]string, err error, want db) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range want {
		if got, ok := values["database."+k]; !ok || got != v {
			t.Errorf("database.%s = %q, want %q", k, got, v)
		}
	}
}

func wantError(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want one saying %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not say %q", err, p)
		}
	}
}

// TestConfigProviders: Kafka's env, file and directory providers and
// Strimzi's aliases of them, by the alias's declared class or, undeclared,
// by the platforms' aliases; their parameters (allowlist.pattern,
// allowed.paths); and what walstream cannot resolve, explained.
func TestConfigProviders(t *testing.T) {
	dir := t.TempDir()
	props := filepath.Join(dir, "db.properties")
	if err := os.WriteFile(props, []byte("user=from-file\npassword=pw:with:colons\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mounted := filepath.Join(dir, "db-secret")
	os.Mkdir(mounted, 0o700)
	if err := os.WriteFile(filepath.Join(mounted, "password"), []byte("mounted-pw"), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"WS_DB_USER": "from-env", "OTHER_USER": "other"}
	env := DefaultProviderEnv()
	env.getenv = func(k string) (string, bool) { v, ok := vars[k]; return v, ok }

	values, err := resolved(t, "c.properties", connectorWith("${env:WS_DB_USER}", "${file:"+props+":password}"), env)
	wantDB(t, values, err, db{"user": "from-env", "password": "pw:with:colons"})
	values, err = resolved(t, "c.properties", connectorWith("${strimzienv:WS_DB_USER}", "${directory:"+mounted+":password}"), env)
	wantDB(t, values, err, db{"user": "from-env", "password": "mounted-pw"})

	// An alias is its declared class's, whatever its name; the keys that
	// declare it are not among the values.
	values, err = resolved(t, "c.properties", connectorWith("${mine:"+props+":user}", "${env:"+mounted+":password}",
		"config.providers=mine,env", "config.providers.mine.class="+classFile, "config.providers.env.class="+classDirectory), env)
	wantDB(t, values, err, db{"user": "from-file", "password": "mounted-pw"})
	for k := range values {
		if isProviderKey(k) {
			t.Errorf("resolved values hold %s, which declares a provider", k)
		}
	}

	// The parameters of Kafka's providers.
	_, err = resolved(t, "c.properties", connectorWith("${e:OTHER_USER}", "x",
		"config.providers=e", "config.providers.e.class="+classEnv, "config.providers.e.param.allowlist.pattern=^WS_"), env)
	wantError(t, err, "line 4: database.user", "environment variable OTHER_USER does not match allowlist.pattern \"^WS_\"")
	_, err = resolved(t, "c.properties", connectorWith("u", "${strimzidir:"+mounted+":password}"), env)
	wantError(t, err, "is not under the provider's allowed.paths (/opt/kafka)")
	_, err = resolved(t, "c.properties", connectorWith("u", "${f:"+props+":password}",
		"config.providers=f", "config.providers.f.class="+classFile, "config.providers.f.param.allowed.paths="+mounted), env)
	wantError(t, err, "is not under the provider's allowed.paths")

	// A key skip names is kept as written: nothing is fetched for it.
	jaas := "${secretsmanager:msk/jaas:config}"
	fetching := env
	fetching.aws = func(context.Context, string) (aws.Config, error) {
		t.Error("AWS was asked for a skipped key's secret")
		return aws.Config{}, nil
	}
	values, left, err := readNamed(t, "c.properties", connectorWith("u", "p", "producer.override.sasl.jaas.config="+jaas)).
		Resolve(fetching, ResolveAll, func(k string) bool { return k == "producer.override.sasl.jaas.config" })
	wantDB(t, values, err, db{"user": "u"})
	if len(left) != 0 {
		t.Errorf("a skipped key's reference listed as unresolved: %v", left)
	}
	if got := values["producer.override.sasl.jaas.config"]; got != jaas {
		t.Errorf("skipped key resolved to %q, want %q as written", got, jaas)
	}

	// What walstream cannot resolve says why and what instead.
	for _, c := range []struct {
		value, more string
		want        []string
	}{
		{"${vault:secret/db:password}", "", []string{`config provider "vault" is not declared`, "config.providers=vault"}},
		{"${v:secret/db:password}", "config.providers=v\nconfig.providers.v.class=io.confluent.csid.config.provider.vault.VaultConfigProvider",
			[]string{"walstream does not know the class of provider v"}},
		{"${s3import:us-west-2:bucket/truststore.jks}", "config.providers=s3import\nconfig.providers.s3import.class=" + classS3Import,
			[]string{"S3 import provider downloads a file", "give walstream its path"}},
		{"${env:NOT_SET}", "", []string{"environment variable NOT_SET is not set"}},
		{"${file:" + props + ":missing}", "", []string{props + " has no key missing"}},
		{"${secrets:db-creds:password}", "", []string{"does not run in a pod (KUBERNETES_SERVICE_HOST is not set)", "mount the Secret", "${directory:"}},
		{"x", "config.providers=y", []string{"config.providers lists y, but config.providers.y.class is not set"}},
	} {
		_, err := resolved(t, "c.properties", connectorWith("u", c.value, strings.Split(c.more, "\n")...), env)
		wantError(t, err, c.want...)
	}
}

// TestResolveNone: resolving nothing, as a config checked away from where
// it runs, reads no variable, file, Secret or AWS store; it lists every
// reference with its key and where its value is, and still refuses one
// whose form is wrong or whose provider walstream cannot read.
func TestResolveNone(t *testing.T) {
	env := DefaultProviderEnv()
	env.getenv = func(k string) (string, bool) {
		t.Errorf("the environment was read for %s", k)
		return "", false
	}
	env.aws = func(context.Context, string) (aws.Config, error) {
		t.Error("AWS was asked")
		return aws.Config{}, nil
	}
	env.serviceAccount = filepath.Join(t.TempDir(), "none")
	cc := readNamed(t, "c.properties", connectorWith("${env:PGUSER}", "${secrets:app/db:password}",
		"database.sslrootcert=${directory:/mnt/ca:ca.crt}",
		"value.converter.basic.auth.user.info=${secretsmanager:arn%3Aaws%3Asecretsmanager%3Aeu-west-1%3A1%3Asecret%3Aregistry:userinfo}",
		"database.sslpassword=${ssm::/msk/sslpassword}"))
	values, left, err := cc.Resolve(env, ResolveNone, nil)
	wantDB(t, values, err, db{"user": "${env:PGUSER}", "password": "${secrets:app/db:password}"})
	want := map[string]string{
		"database.user":                        "environment variable PGUSER",
		"database.password":                    "key password of Secret db (app) in the Kubernetes API",
		"database.sslrootcert":                 "file /mnt/ca/ca.crt",
		"database.sslpassword":                 "parameter /msk/sslpassword in AWS Systems Manager Parameter Store",
		"value.converter.basic.auth.user.info": "field userinfo of secret arn:aws:secretsmanager:eu-west-1:1:secret:registry in AWS Secrets Manager",
	}
	if len(left) != len(want) {
		t.Errorf("unresolved %+v, want %d", left, len(want))
	}
	for _, u := range left {
		if u.Store != want[u.Key] || !strings.HasPrefix(u.Ref, "${") || !strings.Contains(u.At, "c.properties, line ") {
			t.Errorf("unresolved %+v; want its store %q, the reference and where it is", u, want[u.Key])
		}
	}

	for _, c := range []struct {
		value, more string
		want        []string
	}{
		{"${vault:secret/db:password}", "", []string{`config provider "vault" is not declared`}},
		{"${e:OTHER}", "config.providers=e\nconfig.providers.e.class=" + classEnv + "\nconfig.providers.e.param.allowlist.pattern=^WS_",
			[]string{"environment variable OTHER does not match allowlist.pattern"}},
		{"${strimzidir:/mnt/db:password}", "", []string{"is not under the provider's allowed.paths (/opt/kafka)"}},
		{"${secrets:Not_A_Name:password}", "", []string{`"Not_A_Name" is not <namespace>/<name> or <name>`}},
		{"${s3import:us-west-2:bucket/truststore.jks}", "config.providers=s3import\nconfig.providers.s3import.class=" + classS3Import,
			[]string{"S3 import provider downloads a file"}},
	} {
		_, _, err := readNamed(t, "c.properties", connectorWith("u", c.value, strings.Split(c.more, "\n")...)).Resolve(env, ResolveNone, nil)
		wantError(t, err, c.want...)
	}
}

// fakeKubernetes is the Kubernetes API of a pod: the Secrets and
// ConfigMaps it serves to the service account token "pod-token", and the
// environment and service account directory of a pod.
func fakeKubernetes(t *testing.T) (ProviderEnv, *[]string) {
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer pod-token" {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		b64 := base64.StdEncoding.EncodeToString
		switch r.URL.Path {
		case "/api/v1/namespaces/app/secrets/db-creds":
			json.NewEncoder(w).Encode(map[string]any{"kind": "Secret", "data": map[string]string{"user": b64([]byte("k8s-user")), "password": b64([]byte("k8s-pw"))}})
		case "/api/v1/namespaces/kafka/configmaps/db-settings":
			json.NewEncoder(w).Encode(map[string]any{"kind": "ConfigMap", "data": map[string]string{"host": "db.internal"}})
		case "/api/v1/namespaces/app/secrets/locked":
			http.Error(w, `{"kind":"Status","reason":"Forbidden"}`, http.StatusForbidden)
		default:
			http.Error(w, `{"kind":"Status","reason":"NotFound"}`, http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	sa := t.TempDir()
	for name, content := range map[string][]byte{"token": []byte("pod-token\n"), "namespace": []byte("app"),
		"ca.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})} {
		if err := os.WriteFile(filepath.Join(sa, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	u, _ := url.Parse(srv.URL)
	vars := map[string]string{"KUBERNETES_SERVICE_HOST": u.Hostname(), "KUBERNETES_SERVICE_PORT": u.Port()}
	env := DefaultProviderEnv()
	env.getenv = func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	env.serviceAccount = sa
	return env, &paths
}

// TestStrimziProviders: a KafkaConnector pasted with the KafkaConnect
// that declares its providers reads Secrets and ConfigMaps through the
// Kubernetes API with the pod's service account, in the pod's namespace
// unless the path names one, each once; a Secret the service account may
// not read says which Role it needs; resolved locally, they are left as
// written and nothing is asked.
func TestStrimziProviders(t *testing.T) {
	env, paths := fakeKubernetes(t)
	connect := `apiVersion: kafka.strimzi.io/v1beta2
kind: KafkaConnect
metadata:
  name: connect
spec:
  config:
    group.id: connect
    config.providers: k8s,cm
    config.providers.k8s.class: io.strimzi.kafka.KubernetesSecretConfigProvider
    config.providers.cm.class: io.strimzi.kafka.KubernetesConfigMapConfigProvider
---
`
	connector := func(user, password, host string) string {
		return `apiVersion: kafka.strimzi.io/v1beta2
kind: KafkaConnector
metadata:
  name: outbox
  labels:
    strimzi.io/cluster: connect
spec:
  class: io.debezium.connector.postgresql.PostgresConnector
  tasksMax: 1
  config:
    database.hostname: "` + host + `"
    database.dbname: app
    database.user: "` + user + `"
    database.password: "` + password + `"
    topic.prefix: dbz
    table.include.list: public.outbox
    transforms: outbox
    transforms.outbox.type: io.debezium.transforms.outbox.EventRouter
    key.converter: org.apache.kafka.connect.storage.StringConverter
    value.converter: org.apache.kafka.connect.storage.StringConverter
`
	}
	values, err := resolved(t, "connector.yaml", connect+connector("${k8s:db-creds:user}", "${k8s:app/db-creds:password}", "${cm:kafka/db-settings:host}"), env)
	wantDB(t, values, err, db{"hostname": "db.internal", "user": "k8s-user", "password": "k8s-pw"})
	// Strimzi's own alias, undeclared, and Strimzi's documented one.
	values, err = resolved(t, "connector.yaml", connector("${strimzisecrets:db-creds:user}", "${secrets:db-creds:password}", "db"), env)
	wantDB(t, values, err, db{"user": "k8s-user", "password": "k8s-pw"})
	if got := strings.Join(*paths, " "); strings.Count(got, "/api/v1/namespaces/app/secrets/db-creds") != 4 || !strings.Contains(got, "/api/v1/namespaces/kafka/configmaps/db-settings") {
		t.Errorf("the Kubernetes API was asked for %s; want each (alias, Secret) once and the ConfigMap", got)
	}
	_, err = resolved(t, "connector.yaml", connector("u", "${secrets:locked:password}", "db"), env)
	wantError(t, err, "the pod's service account may not get Secret app/locked", "a Role with get on secrets, resourceNames [locked]", "or mount the Secret")
	_, err = resolved(t, "connector.yaml", connector("u", "${secrets:gone:password}", "db"), env)
	wantError(t, err, "Secret app/gone does not exist")
	_, err = resolved(t, "connector.yaml", connector("u", "${secrets:db-creds:nope}", "db"), env)
	wantError(t, err, "Secret db-creds has no key nope")

	// Resolved locally, as for a config printed from it, a reference to a
	// Secret is left as written and the Kubernetes API is not asked.
	before := len(*paths)
	values, left, err := readNamed(t, "connector.yaml", connect+connector("${k8s:db-creds:user}", "${k8s:db-creds:password}", "db")).Resolve(env, ResolveLocal, nil)
	wantDB(t, values, err, db{"user": "${k8s:db-creds:user}", "password": "${k8s:db-creds:password}"})
	if len(left) != 2 || left[1].Key != "database.user" || left[1].Store != "key user of Secret db-creds (the pod's namespace) in the Kubernetes API" {
		t.Errorf("unresolved %+v, want both references, the user's last, naming the Secret", left)
	}
	if len(*paths) != before {
		t.Errorf("resolving locally asked the Kubernetes API %d times", len(*paths)-before)
	}
}

// TestMSKProviders: MSK Connect's Secrets Manager and Parameter Store
// providers, through the AWS SDK with the default credential chain, signed,
// against a stand-in of both services at the providers' endpoint
// parameter: a secret's JSON fields, a URL-encoded ARN, the whole secret,
// a decrypted parameter, and NotFoundStrategy.
func TestMSKProviders(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDWALSTREAMTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "walstream-test-secret")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	var mu sync.Mutex
	var calls []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		target := r.Header.Get("X-Amz-Target")
		mu.Lock()
		calls = append(calls, target+" "+string(body))
		mu.Unlock()
		if auth := r.Header.Get("Authorization"); !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=AKIDWALSTREAMTEST/") || !strings.Contains(auth, "/eu-west-1/") {
			http.Error(w, "unsigned: "+auth, http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		var in struct{ SecretId, Name string }
		json.Unmarshal(body, &in)
		secrets := map[string]string{
			"prod/db": `{"username":"msk-user","password":"msk-pw","port":5432}`,
			"arn:aws:secretsmanager:eu-west-1:123456789012:secret:prod/db-AbCdEf": `{"username":"arn-user","password":"arn-pw"}`,
			"raw": "not json",
		}
		switch target {
		case "secretsmanager.GetSecretValue":
			if s, ok := secrets[in.SecretId]; ok {
				json.NewEncoder(w).Encode(map[string]any{"Name": in.SecretId, "SecretString": s})
				return
			}
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"__type":"ResourceNotFoundException","Message":"Secrets Manager can't find the specified secret."}`)
		case "AmazonSSM.GetParameter":
			if in.Name == "/msk/db/user" {
				json.NewEncoder(w).Encode(map[string]any{"Parameter": map[string]any{"Name": in.Name, "Type": "SecureString", "Value": "ssm-user"}})
				return
			}
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"__type":"ParameterNotFound","message":"not found"}`)
		default:
			http.Error(w, "unknown target "+target, http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	declare := []string{"config.providers=secretsmanager,ssm",
		"config.providers.secretsmanager.class=" + classSecretsManager, "config.providers.secretsmanager.param.region=eu-west-1",
		"config.providers.secretsmanager.param.endpoint=" + srv.URL,
		"config.providers.ssm.class=" + classSSM, "config.providers.ssm.param.region=eu-west-1", "config.providers.ssm.param.endpoint=" + srv.URL}
	env := DefaultProviderEnv()

	values, err := resolved(t, "c.properties", connectorWith("${secretsmanager:prod/db:username}", "${secretsmanager:prod/db:password?ttl=300000}",
		append(declare, "database.port=${secretsmanager:prod/db:port}")...), env)
	wantDB(t, values, err, db{"user": "msk-user", "password": "msk-pw", "port": "5432"})
	if n := strings.Count(strings.Join(calls, "\n"), "secretsmanager.GetSecretValue"); n != 1 {
		t.Errorf("%d GetSecretValue calls for one secret's three keys, want 1:\n%s", n, strings.Join(calls, "\n"))
	}
	arn := url.QueryEscape("arn:aws:secretsmanager:eu-west-1:123456789012:secret:prod/db-AbCdEf")
	values, err = resolved(t, "c.properties", connectorWith("${ssm::/msk/db/user}", "${secretsmanager:"+arn+":password}", declare...), env)
	wantDB(t, values, err, db{"user": "ssm-user", "password": "arn-pw"})
	values, err = resolved(t, "c.properties", connectorWith("u", "${secretsmanager:raw}", declare...), env)
	wantDB(t, values, err, db{"password": "not json"})

	_, err = resolved(t, "c.properties", connectorWith("u", "${secretsmanager:gone:password}", declare...), env)
	wantError(t, err, "reading secret gone from AWS Secrets Manager (region eu-west-1)", "ResourceNotFoundException")
	_, err = resolved(t, "c.properties", connectorWith("${ssm::/msk/gone}", "p", declare...), env)
	wantError(t, err, "reading parameter /msk/gone from AWS Systems Manager Parameter Store (region eu-west-1)", "ParameterNotFound")
	values, err = resolved(t, "c.properties", connectorWith("u", "${secretsmanager:gone:password}",
		append(declare, "config.providers.secretsmanager.param.NotFoundStrategy=ignore")...), env)
	wantDB(t, values, err, db{"password": ""})
	// Without a region there is no endpoint to ask.
	_, err = resolved(t, "c.properties", connectorWith("u", "${secretsmanager:prod/db:password}"), env)
	wantError(t, err, "no AWS region: set the provider's param.region, or AWS_REGION")
}
