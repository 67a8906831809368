package format

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/walstream/walstream/internal/secret"
)

// SubjectStrategy names the subject a key's or value's schema is
// registered under, as a Connect converter's subject name strategy does.
type SubjectStrategy int

// Subject name strategies.
const (
	// SubjectTopic is <topic>-key or <topic>-value (Confluent's
	// TopicNameStrategy, Apicurio's TopicIdStrategy): the default.
	SubjectTopic SubjectStrategy = iota
	// SubjectRecord is the schema's full name (RecordNameStrategy,
	// RecordIdStrategy).
	SubjectRecord
	// SubjectTopicRecord is <topic>-<full name> (TopicRecordNameStrategy,
	// TopicRecordIdStrategy).
	SubjectTopicRecord
)

var subjectStrategies = []struct {
	name    string
	classes []string
}{
	SubjectTopic: {"topic", []string{"io.confluent.kafka.serializers.subject.TopicNameStrategy",
		"io.apicurio.registry.serde.strategy.TopicIdStrategy", "io.apicurio.registry.utils.serde.strategy.TopicIdStrategy"}},
	SubjectRecord: {"record", []string{"io.confluent.kafka.serializers.subject.RecordNameStrategy",
		"io.apicurio.registry.serde.avro.strategy.RecordIdStrategy", "io.apicurio.registry.utils.serde.strategy.RecordIdStrategy"}},
	SubjectTopicRecord: {"topic-record", []string{"io.confluent.kafka.serializers.subject.TopicRecordNameStrategy",
		"io.apicurio.registry.serde.avro.strategy.TopicRecordIdStrategy", "io.apicurio.registry.utils.serde.strategy.TopicRecordIdStrategy"}},
}

func (s SubjectStrategy) String() string { return subjectStrategies[s].name }

// ParseSubjectStrategy reads topic, record or topic-record, or the class of
// one of Confluent's or Apicurio's strategies.
func ParseSubjectStrategy(s string) (SubjectStrategy, error) {
	s = strings.TrimSpace(s)
	for i, st := range subjectStrategies {
		if s == st.name {
			return SubjectStrategy(i), nil
		}
		for _, c := range st.classes {
			if s == c {
				return SubjectStrategy(i), nil
			}
		}
	}
	return 0, fmt.Errorf("subject name strategy %q is not topic, record or topic-record (or Confluent's or Apicurio's class of one)", s)
}

// subject is the subject of a schema named name (its full name) written
// to topic.
func (s SubjectStrategy) subject(topic string, key bool, name string) string {
	switch s {
	case SubjectRecord:
		return name
	case SubjectTopicRecord:
		return topic + "-" + name
	}
	if key {
		return topic + "-key"
	}
	return topic + "-value"
}

// RegistrySettings say how to reach a schema registry through its
// Confluent-compatible REST API (Confluent Schema Registry, Apicurio
// Registry's /apis/ccompat/v7, Redpanda, Karapace) and how schemas are
// registered.
type RegistrySettings struct {
	// URLs are tried in order on a connection error.
	URLs []string
	// TLS, when not nil, verifies the registry against its roots and
	// server name, and holds the client certificate; its files are read
	// again for each connection.
	TLS *secret.TLS
	// User and Password are HTTP basic authentication; Token is a bearer
	// token. Never logged.
	User, Password, Token string
	// KeyStrategy and ValueStrategy name the subjects.
	KeyStrategy, ValueStrategy SubjectStrategy
	// AutoRegister registers a schema the subject lacks
	// (auto.register.schemas); without it a schema must be registered
	// already, or, with UseLatest, be the subject's latest version.
	AutoRegister bool
	UseLatest    bool
	// Timeout bounds one request.
	Timeout time.Duration
}

// DefaultRegistryTimeout bounds one request to the schema registry.
const DefaultRegistryTimeout = 10 * time.Second

// CheckURLs reports a registry URL that is not an http or https URL.
func (r RegistrySettings) CheckURLs() error {
	if len(r.URLs) == 0 {
		return errors.New("no schema registry URL")
	}
	var errs []error
	for _, u := range r.URLs {
		p, err := url.Parse(u)
		if err != nil || p.Scheme != "http" && p.Scheme != "https" || p.Host == "" {
			errs = append(errs, fmt.Errorf("schema registry URL %q is not an http:// or https:// URL", RedactURL(u)))
		}
	}
	return errors.Join(errs...)
}

// CompatURL turns the URL of Apicurio Registry's own API, which Apicurio's
// converter takes (http://host/apis/registry/v2 or v3), into its
// Confluent-compatible API's (http://host/apis/ccompat/v7); any other URL
// is returned as it is.
func CompatURL(u string) string {
	trimmed := strings.TrimRight(u, "/")
	for _, native := range []string{"/apis/registry/v2", "/apis/registry/v3"} {
		if base, ok := strings.CutSuffix(trimmed, native); ok {
			return base + "/apis/ccompat/v7"
		}
	}
	return u
}

// RegistryError is a schema registry request that failed. Unless
// Permanent, it is the registry being unreachable or failing, and the
// session retries; Permanent ones (a schema refused as incompatible, one
// not registered while walstream may not register it, refused
// credentials) stop walstream.
type RegistryError struct {
	URL       string
	Operation string
	Subject   string
	// Level is the subject's compatibility level when the registry refused
	// the schema as incompatible.
	Level     string
	Permanent bool
	// Hint says what to do.
	Hint string
	Err  error
}

func (e *RegistryError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "schema registry at %s: %s", e.URL, e.Operation)
	if e.Subject != "" {
		fmt.Fprintf(&b, " for subject %s", e.Subject)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	if e.Level != "" {
		fmt.Fprintf(&b, " (compatibility level %s)", e.Level)
	}
	if e.Hint != "" {
		b.WriteString("; " + e.Hint)
	}
	return b.String()
}

func (e *RegistryError) Unwrap() error { return e.Err }

// registry registers and looks up schemas. Only the producer's goroutine
// calls it, bar the prober.
type registry struct {
	cl       *sr.Client
	url      string // for messages, without credentials
	settings RegistrySettings
	metrics  *RegistryMetrics
}

func newRegistry(s RegistrySettings, m *RegistryMetrics) (*registry, error) {
	if err := s.CheckURLs(); err != nil {
		return nil, err
	}
	timeout := s.Timeout
	if timeout == 0 {
		timeout = DefaultRegistryTimeout
	}
	hc := &http.Client{Timeout: timeout}
	if s.TLS != nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialTLSContext = s.TLS.DialContext
		hc.Transport = tr
	}
	opts := []sr.ClientOpt{sr.URLs(s.URLs...), sr.HTTPClient(hc), sr.UserAgent("walstream")}
	if s.User != "" || s.Password != "" {
		opts = append(opts, sr.BasicAuth(s.User, s.Password))
	}
	if s.Token != "" {
		opts = append(opts, sr.BearerToken(s.Token))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("creating the schema registry client: %w", err)
	}
	urls := make([]string, len(s.URLs))
	for i, u := range s.URLs {
		urls[i] = RedactURL(u)
	}
	return &registry{cl: cl, url: strings.Join(urls, ","), settings: s, metrics: m}, nil
}

// Operations, the label of the registry's metrics.
const (
	opRegister = "register"
	opLookup   = "lookup"
	opLatest   = "latest"
	opConfig   = "config"
)

// do runs one request and counts it.
func (r *registry) do(op string, f func() error) error {
	start := time.Now()
	err := f()
	r.metrics.observe(op, time.Since(start), err)
	return err
}

// id returns the id of schema in subject: registering it (a schema already
// there keeps its id and adds no version), looking it up, or taking the
// subject's latest version, as the settings say.
func (r *registry) id(ctx context.Context, subject, schema string) (int, error) {
	s := sr.Schema{Schema: schema}
	var id int
	var err error
	op := opRegister
	switch {
	case r.settings.AutoRegister:
		err = r.do(op, func() (err error) { id, err = r.cl.RegisterSchema(ctx, subject, s, -1, -1); return err })
	case r.settings.UseLatest:
		op = opLatest
		var latest sr.SubjectSchema
		if err = r.do(op, func() (err error) { latest, err = r.cl.SchemaByVersion(ctx, subject, -1); return err }); err == nil {
			if latest.Schema.Schema != schema {
				return 0, &RegistryError{URL: r.url, Operation: "using the latest version", Subject: subject, Permanent: true,
					Err:  fmt.Errorf("version %d (id %d) is not the schema walstream writes, %s", latest.Version, latest.ID, schema),
					Hint: "register the schema Debezium's converter would register as the subject's latest version, or let walstream register it (auto.register.schemas=true)"}
			}
			id = latest.ID
		}
	default:
		op = opLookup
		var found sr.SubjectSchema
		err = r.do(op, func() (err error) { found, err = r.cl.LookupSchema(ctx, subject, s); return err })
		id = found.ID
	}
	if err != nil {
		return 0, r.failed(ctx, op, subject, schema, err)
	}
	return id, nil
}

// failed turns a request's error into a RegistryError that says whether a
// retry can help and, when it cannot, what to do.
func (r *registry) failed(ctx context.Context, op, subject, schema string, err error) error {
	re := &RegistryError{URL: r.url, Subject: subject, Err: err}
	switch op {
	case opRegister:
		re.Operation = "registering " + schema
	case opLatest:
		re.Operation = "reading the latest version"
	case opLookup:
		re.Operation = "looking up " + schema
	default:
		re.Operation = "reading the compatibility level"
	}
	var resp *sr.ResponseError
	var unknownAuthority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var verification *tls.CertificateVerificationError
	switch {
	case errors.As(err, &unknownAuthority) || errors.As(err, &hostname) || errors.As(err, &verification):
		re.Permanent = true
		re.Hint = "the registry's certificate does not verify against the CA and server name walstream was given"
		return re
	case !errors.As(err, &resp):
		return re // no answer: retry
	}
	switch code := resp.StatusCode; {
	case code == http.StatusConflict:
		re.Permanent = true
		re.Level = r.level(ctx, subject)
		re.Hint = "the registry refuses the schema under the subject's compatibility rule. Make the change compatible, register the schema under a new subject, or relax the subject's compatibility (PUT /config/" +
			subject + `, e.g. {"compatibility":"NONE"}), then start walstream again`
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		re.Permanent = true
		re.Hint = "check the schema registry credentials and the registry's permissions"
	case code == http.StatusNotFound && op != opRegister:
		re.Permanent = true
		re.Hint = "the subject does not hold this schema and walstream may not register it (auto.register.schemas=false): register it, or let walstream register it"
	case code == http.StatusUnprocessableEntity || code == http.StatusBadRequest:
		re.Permanent = true
		re.Hint = "the registry refuses the schema itself"
	case code == http.StatusNotFound:
		re.Permanent = true
		re.Hint = "the URL does not serve a Confluent-compatible API (Apicurio Registry serves it under /apis/ccompat/v7)"
	}
	return re
}

// level is the subject's compatibility level, or the registry's global one
// when the subject has none; "unknown" when neither can be read.
func (r *registry) level(ctx context.Context, subject string) string {
	var res []sr.CompatibilityResult
	_ = r.do(opConfig, func() error {
		res = r.cl.Compatibility(sr.WithParams(ctx, sr.DefaultToGlobal), subject)
		return res[0].Err
	})
	if res[0].Err != nil {
		return "unknown"
	}
	return res[0].Level.String()
}

// Check asks the registry for its global compatibility level: the
// cheapest request that shows it answers and takes the credentials.
func (r *registry) Check(ctx context.Context) error {
	var res []sr.CompatibilityResult
	err := r.do(opConfig, func() error {
		res = r.cl.Compatibility(ctx)
		return res[0].Err
	})
	if err != nil {
		return r.failed(ctx, opConfig, "", "", err)
	}
	return nil
}

// CheckRegistry asks the registry s names whether it answers, as a
// session does before it streams; it returns the registry's URLs as
// messages name them.
func CheckRegistry(ctx context.Context, s RegistrySettings) (string, error) {
	r, err := newRegistry(s, nil)
	if err != nil {
		return strings.Join(s.URLs, ","), err
	}
	return r.url, r.Check(ctx)
}

// maxCachedSchemas bounds the schemas an encoder remembers: expanded
// payloads of endless shapes must not grow memory without end.
const maxCachedSchemas = 4096

// schemaIDs finds the id of each schema an encoder writes, asking the
// registry once per subject and schema. The producer's goroutine owns it.
type schemaIDs struct {
	reg      *registry
	key      bool
	strategy SubjectStrategy
	buf      []byte // scratch for the schema text of the event at hand
	byText   map[string]*knownSchema
}

// knownSchema is a schema text and its ids, by topic (the subject follows
// from the topic and the schema).
type knownSchema struct {
	text, name string
	ids        map[string]int
}

func newSchemaIDs(reg *registry, key bool, strategy SubjectStrategy) *schemaIDs {
	return &schemaIDs{reg: reg, key: key, strategy: strategy, byText: make(map[string]*knownSchema)}
}

// scratch is a buffer to build a schema text in.
func (s *schemaIDs) scratch() []byte { return s.buf[:0] }

// header appends the Confluent wire format's header for schema text
// written to topic: magic byte 0 and the schema's id.
func (s *schemaIDs) header(ctx context.Context, dst []byte, topic string, text []byte) ([]byte, error) {
	s.buf = text[:0]
	ks := s.byText[string(text)]
	if ks == nil {
		if len(s.byText) >= maxCachedSchemas {
			clear(s.byText)
		}
		ks = &knownSchema{text: string(text), name: avroFullName(text), ids: make(map[string]int)}
		s.byText[ks.text] = ks
	}
	id, ok := ks.ids[topic]
	if !ok {
		var err error
		if id, err = s.reg.id(ctx, s.strategy.subject(topic, s.key, ks.name), ks.text); err != nil {
			return nil, err
		}
		if len(ks.ids) >= maxCachedTopics {
			clear(ks.ids)
		}
		ks.ids[topic] = id
	}
	return (&sr.ConfluentHeader{}).AppendEncode(dst, id, nil)
}

// avroFullName is the name the record strategies give a schema, as
// Confluent's AvroSchema.name() does: a record's full name, a primitive's
// type, "union" for a union.
func avroFullName(text []byte) string {
	var v any
	if json.Unmarshal(text, &v) != nil {
		return ""
	}
	switch t := v.(type) {
	case string:
		return t
	case []any:
		return "union"
	case map[string]any:
		if t["type"] == "record" {
			if ns, _ := t["namespace"].(string); ns != "" {
				return ns + "." + t["name"].(string)
			}
			name, _ := t["name"].(string)
			return name
		}
		typ, _ := t["type"].(string)
		return typ
	}
	return ""
}

// RegistryMetrics count the requests to the schema registry.
type RegistryMetrics struct {
	requests, errors *prometheus.CounterVec
	seconds          prometheus.Histogram
}

func NewRegistryMetrics(reg prometheus.Registerer) *RegistryMetrics {
	m := &RegistryMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "walstream_schema_registry_requests_total", Help: "Requests to the schema registry, by operation: register, lookup, latest, config."}, []string{"operation"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "walstream_schema_registry_errors_total", Help: "Requests to the schema registry that failed or were refused, by operation."}, []string{"operation"}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "walstream_schema_registry_request_duration_seconds", Help: "Time of one request to the schema registry.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
	}
	reg.MustRegister(m.requests, m.errors, m.seconds)
	return m
}

func (m *RegistryMetrics) observe(op string, d time.Duration, err error) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(op).Inc()
	if err != nil {
		m.errors.WithLabelValues(op).Inc()
	}
	m.seconds.Observe(d.Seconds())
}

// RedactURL drops a URL's user information and query, which may hold
// credentials, for messages: a schema registry's, a token endpoint's.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}
