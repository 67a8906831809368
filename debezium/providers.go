package debezium

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
)

// Kafka's config providers (KIP-297), as a connector config uses them: a
// value holds ${alias:path:key} or ${alias:key}, and the worker's config
// declares each alias and its class (config.providers=alias,
// config.providers.<alias>.class=..., config.providers.<alias>.param.<name>=...).
// Resolve reads those declarations where the connector config's file has
// them (its own keys, or a Strimzi KafkaConnect beside the
// KafkaConnector), maps each alias by its class, and otherwise knows the
// aliases the platforms declare or document: Kafka's env, file and
// directory; Strimzi's strimzienv, strimzifile, strimzidir and
// strimzisecrets, which it declares in every Kafka Connect worker (0.46
// and later), and secrets and configmaps, which its documentation
// declares; MSK Connect's secretsmanager and ssm. (docs/debezium.md,
// Config providers)

// The ConfigProvider classes walstream resolves itself.
const (
	classFile           = "org.apache.kafka.common.config.provider.FileConfigProvider"
	classDirectory      = "org.apache.kafka.common.config.provider.DirectoryConfigProvider"
	classEnv            = "org.apache.kafka.common.config.provider.EnvVarConfigProvider"
	classStrimziEnv     = "io.strimzi.kafka.EnvVarConfigProvider" // Strimzi's before Kafka had one; removed in Strimzi 0.42
	classSecrets        = "io.strimzi.kafka.KubernetesSecretConfigProvider"
	classConfigMaps     = "io.strimzi.kafka.KubernetesConfigMapConfigProvider"
	classSecretsManager = "com.amazonaws.kafka.config.providers.SecretsManagerConfigProvider"
	classSSM            = "com.amazonaws.kafka.config.providers.SsmParamStoreConfigProvider"
	classS3Import       = "com.amazonaws.kafka.config.providers.S3ImportConfigProvider"
)

// providerRef is Kafka's ConfigTransformer.DEFAULT_PATTERN: the alias,
// then an optional path ending at the first colon, then the key. Go's
// regexp prefers as Java's does, so the path and key split as Kafka
// splits them.
var providerRef = regexp.MustCompile(`\$\{([^}]*?):(([^}]*?):)?([^}]*?)\}`)

// ProviderRefs are the config provider references in s, as written:
// ${alias:path:key} or ${alias:key}.
func ProviderRefs(s string) []string {
	return providerRef.FindAllString(s, -1)
}

// provider is an alias's declaration: its class and its parameters.
type provider struct {
	class  string
	params map[string]string
}

// platformProviders are the aliases known when the connector config does
// not declare them, as the platforms declare them.
var platformProviders = map[string]provider{
	"env":            {class: classEnv},
	"file":           {class: classFile},
	"directory":      {class: classDirectory},
	"strimzienv":     {class: classEnv, params: map[string]string{"allowlist.pattern": ".*"}},
	"strimzifile":    {class: classFile},
	"strimzidir":     {class: classDirectory, params: map[string]string{"allowed.paths": "/opt/kafka"}},
	"strimzisecrets": {class: classSecrets},
	"secrets":        {class: classSecrets},
	"configmaps":     {class: classConfigMaps},
	"secretsmanager": {class: classSecretsManager},
	"ssm":            {class: classSSM},
}

// isProviderKey reports whether key declares config providers, as a
// worker's config does.
func isProviderKey(key string) bool {
	return key == "config.providers" || strings.HasPrefix(key, "config.providers.")
}

// declaredProviders reads the config.providers keys of values: the
// aliases config.providers lists, each with its class and parameters.
func declaredProviders(values map[string]string) (map[string]provider, error) {
	out := make(map[string]provider)
	var errs []error
	for _, alias := range strings.Split(values["config.providers"], ",") {
		if alias = strings.TrimSpace(alias); alias == "" {
			continue
		}
		class := strings.TrimSpace(values["config.providers."+alias+".class"])
		if class == "" {
			errs = append(errs, fmt.Errorf("config.providers lists %s, but config.providers.%s.class is not set", alias, alias))
			continue
		}
		p := provider{class: class, params: make(map[string]string)}
		prefix := "config.providers." + alias + ".param."
		for k, v := range values {
			if name, ok := strings.CutPrefix(k, prefix); ok {
				p.params[name] = v
			}
		}
		out[alias] = p
	}
	return out, errors.Join(errs...)
}

// ProviderEnv is what config providers read besides the config: the
// environment, the pod's service account, AWS's configuration.
type ProviderEnv struct {
	getenv func(string) (string, bool)
	// serviceAccount is the directory of the pod's service account
	// token, the cluster's CA and the pod's namespace.
	serviceAccount string
	// aws loads AWS's configuration for a region ("": the default chain's).
	aws func(ctx context.Context, region string) (aws.Config, error)
}

// DefaultProviderEnv is the process's: its environment, the service
// account Kubernetes mounts in a pod, and AWS's default configuration.
func DefaultProviderEnv() ProviderEnv {
	return ProviderEnv{getenv: os.LookupEnv, serviceAccount: "/var/run/secrets/kubernetes.io/serviceaccount",
		aws: func(ctx context.Context, region string) (aws.Config, error) {
			var opts []func(*awsconfig.LoadOptions) error
			if region != "" {
				opts = append(opts, awsconfig.WithRegion(region))
			}
			return awsconfig.LoadDefaultConfig(ctx, opts...)
		}}
}

// providerTimeout bounds one look-up in a remote store: a config is read
// before anything runs, and a store that does not answer must not hang
// the start.
const providerTimeout = 30 * time.Second

// Resolving says which config provider references Resolve reads.
type Resolving int

const (
	// ResolveAll reads every reference, as Kafka Connect does.
	ResolveAll Resolving = iota
	// ResolveLocal reads the environment and files, and leaves the
	// references to remote stores (the Kubernetes API, AWS) as written:
	// a config printed from the connector config neither fetches secrets
	// nor needs to run where they can be fetched.
	ResolveLocal
	// ResolveNone reads no reference: a config checked away from where it
	// runs (a CI pipeline), where the environment, the files and the
	// stores a reference names are not the deployment's.
	ResolveNone
)

// Unresolved is a config provider reference Resolve left as written: the
// key holding it (At, where it is), the reference, and where its value
// is.
type Unresolved struct {
	Key, At, Ref, Store string
}

// Resolve is the connector config's values with the config provider
// references replaced by what the providers give through env, those that
// mode reads; the keys declaring providers are left out. unresolved are
// the references mode left as written, their form checked all the same.
// A key skip reports is kept as written, and nothing is fetched for it.
// Each error names the key where it is (At).
func (c *Connector) Resolve(env ProviderEnv, mode Resolving, skip func(key string) bool) (values map[string]string, unresolved []Unresolved, err error) {
	r, err := c.resolver(env, mode)
	errs := []error{err}
	values = make(map[string]string, len(c.Values))
	for _, k := range slices.Sorted(maps.Keys(c.Values)) {
		v := c.Values[k]
		switch {
		case isProviderKey(k): // read by resolver
			continue
		case skip != nil && skip(k):
			values[k] = v
			continue
		}
		rv, left, err := r.resolve(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.At(k), err))
		}
		for _, u := range left {
			u.Key, u.At = k, c.At(k)
			unresolved = append(unresolved, u)
		}
		values[k] = rv
	}
	return values, unresolved, errors.Join(errs...)
}

// resolver is the config providers the connector config may refer to:
// those the worker declares, then those it declares itself.
func (c *Connector) resolver(env ProviderEnv, mode Resolving) (*resolver, error) {
	decl := make(map[string]string)
	var lists []string
	for _, m := range []map[string]string{c.worker, c.Values} {
		for k, v := range m {
			if k == "config.providers" {
				lists = append(lists, v)
			} else if isProviderKey(k) {
				decl[k] = v
			}
		}
	}
	decl["config.providers"] = strings.Join(lists, ",")
	declared, err := declaredProviders(decl)
	if err != nil {
		err = fmt.Errorf("connector config %s: %w", c.Path, err)
	}
	return &resolver{declared: declared, env: env, mode: mode}, err
}

// resolver replaces config provider references in a connector config's
// values.
type resolver struct {
	declared map[string]provider
	env      ProviderEnv
	mode     Resolving
	// cache holds what each (alias, path) gave, so that one secret is
	// fetched once.
	cache map[[2]string]map[string]string
}

// remoteClasses are the classes whose stores are reached over the network.
var remoteClasses = []string{classSecrets, classConfigMaps, classSecretsManager, classSSM}

// resolve replaces the references in v that r's mode reads, and returns
// those it left. A reference walstream cannot resolve is an error saying
// why and what to do instead: the secret would otherwise be lost, and the
// reference's text taken for the value.
func (r *resolver) resolve(v string) (string, []Unresolved, error) {
	var errs []error
	var left []Unresolved
	out := providerRef.ReplaceAllStringFunc(v, func(ref string) string {
		m := providerRef.FindStringSubmatch(ref)
		alias := m[1]
		p, ok := r.declared[alias]
		if !ok {
			p, ok = platformProviders[alias]
		}
		if !ok {
			errs = append(errs, fmt.Errorf("config provider %q is not declared: add the worker's config.providers=%s and config.providers.%s.class=... to the pasted config "+
				"(walstream knows the classes of Kafka's, Strimzi's and MSK's providers)", alias, alias, alias))
			return ref
		}
		// Its form is checked whether it is read or not.
		loc, err := locate(alias, p, m[3], m[4])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", ref, p.class, err))
			return ref
		}
		if r.mode == ResolveNone || r.mode == ResolveLocal && slices.Contains(remoteClasses, p.class) {
			left = append(left, Unresolved{Ref: ref, Store: loc.store})
			return ref
		}
		s, err := r.get(alias, p, loc)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s (%s, %s): %w", ref, loc.store, p.class, err))
			return ref
		}
		return s
	})
	return out, left, errors.Join(errs...)
}

// location is where a reference's value is, as its provider reads it.
type location struct {
	path, key string
	// store names it for people: the variable, the file, the Secret, the
	// secret in AWS.
	store string
}

// locate checks a reference's path and key as its provider would, reading
// nothing, and says where its value is: a reference left unresolved is
// still checked, and one that cannot be read names where it looked.
func locate(alias string, p provider, path, key string) (location, error) {
	loc := location{path: path, key: key}
	switch p.class {
	case classEnv, classStrimziEnv:
		if path != "" {
			return loc, fmt.Errorf("the environment has no path (%q): write ${alias:NAME}", path)
		}
		if pattern, ok := p.params["allowlist.pattern"]; ok {
			re, err := regexp.Compile(pattern)
			if err != nil {
				return loc, fmt.Errorf("allowlist.pattern %q: %w", pattern, err)
			}
			if !re.MatchString(key) {
				return loc, fmt.Errorf("environment variable %s does not match allowlist.pattern %q", key, pattern)
			}
		}
		loc.store = "environment variable " + key
	case classDirectory:
		if path == "" {
			return loc, errors.New("the directory provider needs a path: ${alias:/path/to/dir:file}")
		}
		if strings.ContainsRune(key, filepath.Separator) {
			return loc, fmt.Errorf("%q is not a file name in %s", key, path)
		}
		loc.store = "file " + filepath.Join(path, key)
		return loc, allowedPath(p, path)
	case classFile:
		if path == "" {
			return loc, errors.New("the file provider needs a path: ${alias:/path/to.properties:key}")
		}
		loc.store = "key " + key + " of properties file " + path
		return loc, allowedPath(p, path)
	case classSecrets, classConfigMaps:
		kind := map[string]string{classSecrets: "Secret", classConfigMaps: "ConfigMap"}[p.class]
		m := kubeName.FindStringSubmatch(path)
		if m == nil {
			return loc, fmt.Errorf("%q is not <namespace>/<name> or <name>", path)
		}
		ns := m[1]
		if ns == "" {
			ns = "the pod's namespace"
		}
		loc.store = fmt.Sprintf("key %s of %s %s (%s) in the Kubernetes API", key, kind, m[2], ns)
	case classSecretsManager:
		// MSK's provider takes a key's options after ?, and URL-encoded
		// ARNs, whose colons Kafka's pattern would take for separators.
		key, _, _ = strings.Cut(key, "?")
		if path == "" { // ${secretsmanager:name}: the whole secret
			path, key = key, ""
		}
		decoded, err := url.QueryUnescape(path) // as Java's URLDecoder
		if err != nil {
			return loc, fmt.Errorf("secret id %q: %w", path, err)
		}
		loc.path, loc.key = decoded, key
		loc.store = "secret " + decoded + " in AWS Secrets Manager"
		if key != "" {
			loc.store = "field " + key + " of " + loc.store
		}
	case classSSM:
		loc.store = "parameter " + key + " in AWS Systems Manager Parameter Store"
	case classS3Import:
		return loc, errors.New("MSK's S3 import provider downloads a file (a trust store) and gives its path: walstream does not download it; " +
			"download the file where walstream runs and give walstream its path instead (a PEM file: the schema registry's CA file, or sslrootcert in the Postgres URL)")
	default:
		return loc, fmt.Errorf("walstream does not know the class of provider %s; resolve the value and give it in the pasted config, or set the setting directly", alias)
	}
	return loc, nil
}

// get is what the provider gives at loc, which locate checked.
func (r *resolver) get(alias string, p provider, loc location) (string, error) {
	switch p.class {
	case classEnv, classStrimziEnv:
		v, ok := r.env.getenv(loc.key)
		if !ok {
			return "", fmt.Errorf("environment variable %s is not set", loc.key)
		}
		return v, nil
	case classDirectory:
		return directoryProvider(loc.path, loc.key)
	case classSSM:
		return r.ssmParameter(p, loc.key)
	}
	data, err := r.fetch(alias, p, loc.path)
	if err != nil {
		return "", err
	}
	v, ok := data[loc.key]
	if !ok && p.class == classSecretsManager && p.params["NotFoundStrategy"] == "ignore" {
		return "", nil
	}
	if !ok {
		return "", fmt.Errorf("%s has no key %s", describePath(p.class, loc.path), loc.key)
	}
	return v, nil
}

// fetch reads what the store holds at path (a properties file, a Secret,
// a ConfigMap, a secret of AWS Secrets Manager), once per alias and path.
func (r *resolver) fetch(alias string, p provider, path string) (map[string]string, error) {
	if data, ok := r.cache[[2]string{alias, path}]; ok {
		return data, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), providerTimeout)
	defer cancel()
	var data map[string]string
	var err error
	switch p.class {
	case classFile:
		data, err = fileProvider(path)
	case classSecrets:
		data, err = r.env.kubernetes(ctx, "secrets", path)
	case classConfigMaps:
		data, err = r.env.kubernetes(ctx, "configmaps", path)
	case classSecretsManager:
		data, err = r.secret(ctx, p, path)
	}
	if err != nil {
		return nil, err
	}
	if r.cache == nil {
		r.cache = make(map[[2]string]map[string]string)
	}
	r.cache[[2]string{alias, path}] = data
	return data, nil
}

func describePath(class, path string) string {
	switch class {
	case classSecrets:
		return "Secret " + path
	case classConfigMaps:
		return "ConfigMap " + path
	case classSecretsManager:
		return "secret " + path + " in AWS Secrets Manager"
	}
	return path
}

// allowedPath applies the allowed.paths parameter of Kafka's file and
// directory providers (KIP-993): when set, path must lie under one of
// them.
func allowedPath(p provider, path string) error {
	list, ok := p.params["allowed.paths"]
	if !ok || list == "" {
		return nil
	}
	clean := filepath.Clean(path)
	for _, a := range strings.Split(list, ",") {
		a = filepath.Clean(strings.TrimSpace(a))
		if rel, err := filepath.Rel(a, clean); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return nil
		}
	}
	return fmt.Errorf("%s is not under the provider's allowed.paths (%s)", path, list)
}

// fileProvider is FileConfigProvider: the keys of a properties file.
func fileProvider(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	props := newConnector(path, "properties")
	if err := props.readProperties(b); err != nil {
		return nil, err
	}
	return props.Values, nil
}

// directoryProvider is DirectoryConfigProvider: the content of the regular
// file key in the directory path, as it is (a mounted Secret's key).
func directoryProvider(dir, key string) (string, error) {
	name := filepath.Join(dir, key)
	if fi, err := os.Stat(name); err != nil {
		return "", err
	} else if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", name)
	}
	b, err := os.ReadFile(name)
	return string(b), err
}

// kubeName is the path of Strimzi's Kubernetes providers: <namespace>/<name>,
// or <name> in the pod's namespace.
var kubeName = regexp.MustCompile(`^(?:([a-z0-9.-]+)/)?([a-z0-9.-]+)$`)

// kubernetes reads a Secret's or ConfigMap's data through the Kubernetes
// API, with the pod's service account, as Strimzi's providers do: one GET,
// so that no Kubernetes client is linked for it.
func (e ProviderEnv) kubernetes(ctx context.Context, resource, path string) (map[string]string, error) {
	kind := map[string]string{"secrets": "Secret", "configmaps": "ConfigMap"}[resource]
	m := kubeName.FindStringSubmatch(path)
	if m == nil {
		return nil, fmt.Errorf("%q is not <namespace>/<name> or <name>", path)
	}
	mount := fmt.Sprintf("or mount the %s in walstream's pod and refer to its files as ${directory:/mount/path:key}", kind)
	host, ok := e.getenv("KUBERNETES_SERVICE_HOST")
	port, _ := e.getenv("KUBERNETES_SERVICE_PORT")
	if !ok || host == "" {
		return nil, fmt.Errorf("walstream reads a %s through the Kubernetes API with its pod's service account, but it does not run in a pod (KUBERNETES_SERVICE_HOST is not set): "+
			"run it in the cluster, %s", kind, mount)
	}
	token, err := os.ReadFile(filepath.Join(e.serviceAccount, "token"))
	if err != nil {
		return nil, fmt.Errorf("reading the pod's service account token (is automountServiceAccountToken off?): %w; mount it, %s", err, mount)
	}
	ns, name := m[1], m[2]
	if ns == "" {
		b, err := os.ReadFile(filepath.Join(e.serviceAccount, "namespace"))
		if err != nil {
			return nil, fmt.Errorf("reading the pod's namespace for %s %s: %w; name it: <namespace>/%s", kind, name, err, name)
		}
		ns = strings.TrimSpace(string(b))
	}
	roots := x509.NewCertPool()
	ca, err := os.ReadFile(filepath.Join(e.serviceAccount, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("reading the cluster's CA: %w", err)
	}
	if !roots.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s holds no PEM certificate", filepath.Join(e.serviceAccount, "ca.crt"))
	}
	if port == "" {
		port = "443"
	}
	u := url.URL{Scheme: "https", Host: net.JoinHostPort(host, port), Path: fmt.Sprintf("/api/v1/namespaces/%s/%s/%s", ns, resource, name)}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading %s %s/%s from the Kubernetes API: %w", kind, ns, name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("reading %s %s/%s from the Kubernetes API: %w", kind, ns, name, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, fmt.Errorf("%s %s/%s does not exist", kind, ns, name)
	case http.StatusForbidden:
		return nil, fmt.Errorf("the pod's service account may not get %s %s/%s: give it a Role with get on %s, resourceNames [%s], and a RoleBinding in namespace %s, %s",
			kind, ns, name, resource, name, ns, mount)
	case http.StatusUnauthorized:
		return nil, fmt.Errorf("the Kubernetes API refused the pod's service account token reading %s %s/%s", kind, ns, name)
	default:
		return nil, fmt.Errorf("reading %s %s/%s from the Kubernetes API: %s", kind, ns, name, resp.Status)
	}
	var obj struct{ Data map[string]string }
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, fmt.Errorf("reading %s %s/%s: %w", kind, ns, name, err)
	}
	if resource == "configmaps" {
		return obj.Data, nil
	}
	data := make(map[string]string, len(obj.Data))
	for k, v := range obj.Data {
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return nil, fmt.Errorf("key %s of Secret %s/%s: %w", k, ns, name, err)
		}
		data[k] = string(b)
	}
	return data, nil
}

// awsConfig is AWS's configuration for the provider's region parameter,
// with its endpoint parameter, MSK's providers' two common ones.
func (r *resolver) awsConfig(ctx context.Context, p provider) (aws.Config, *string, error) {
	cfg, err := r.env.aws(ctx, p.params["region"])
	if err != nil {
		return cfg, nil, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return cfg, nil, errors.New("no AWS region: set the provider's param.region, or AWS_REGION")
	}
	var endpoint *string
	if e := p.params["endpoint"]; e != "" {
		endpoint = aws.String(e)
	}
	return cfg, endpoint, nil
}

// secret is MSK's SecretsManagerConfigProvider: the fields of the JSON
// object a secret's SecretString holds, and, under "", the string itself.
func (r *resolver) secret(ctx context.Context, p provider, id string) (map[string]string, error) {
	cfg, endpoint, err := r.awsConfig(ctx, p)
	if err != nil {
		return nil, err
	}
	out, err := secretsmanager.NewFromConfig(cfg, func(o *secretsmanager.Options) { o.BaseEndpoint = endpoint }).
		GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)})
	var nf *smtypes.ResourceNotFoundException
	switch {
	case errors.As(err, &nf) && p.params["NotFoundStrategy"] == "ignore":
		return map[string]string{}, nil
	case err != nil:
		return nil, fmt.Errorf("reading secret %s from AWS Secrets Manager (region %s): %w", id, cfg.Region, err)
	case out.SecretString == nil:
		return nil, fmt.Errorf("secret %s holds binary data, not a string", id)
	}
	raw := *out.SecretString
	data := map[string]string{"": raw}
	if p.params["RawSecretEncoding"] == "base64" {
		data[""] = base64.StdEncoding.EncodeToString([]byte(raw))
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal([]byte(raw), &fields) != nil {
		return data, nil // only the whole secret can be asked for
	}
	for k, v := range fields {
		if s, err := jsonScalar(v); err == nil {
			data[k] = s
		}
	}
	return data, nil
}

// ssmParameter is MSK's SsmParamStoreConfigProvider: the parameter named
// by the key (${ssm::/path/to/parameter}), decrypted.
func (r *resolver) ssmParameter(p provider, name string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), providerTimeout)
	defer cancel()
	cfg, endpoint, err := r.awsConfig(ctx, p)
	if err != nil {
		return "", err
	}
	out, err := ssm.NewFromConfig(cfg, func(o *ssm.Options) { o.BaseEndpoint = endpoint }).
		GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(name), WithDecryption: aws.Bool(true)})
	var nf *ssmtypes.ParameterNotFound
	switch {
	case errors.As(err, &nf) && p.params["NotFoundStrategy"] == "ignore":
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading parameter %s from AWS Systems Manager Parameter Store (region %s): %w", name, cfg.Region, err)
	case out.Parameter == nil || out.Parameter.Value == nil:
		return "", fmt.Errorf("parameter %s has no value", name)
	}
	return *out.Parameter.Value, nil
}
