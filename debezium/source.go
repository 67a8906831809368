package debezium

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// SourceKind says where a connector's offset is read from.
type SourceKind int

const (
	// SourceREST is Kafka Connect's REST API: GET
	// /connectors/<name>/offsets (KIP-875, Kafka 3.6 and later), any mode.
	SourceREST SourceKind = iota + 1
	// SourceTopic is a distributed worker's offsets topic
	// (offset.storage.topic), read_committed.
	SourceTopic
	// SourceFile is a file: a saved answer of the REST endpoint, or a
	// standalone worker's offsets file (offset.storage.file.filename).
	SourceFile
)

func (k SourceKind) String() string {
	switch k {
	case SourceREST:
		return "Kafka Connect's REST API"
	case SourceTopic:
		return "the offsets topic"
	case SourceFile:
		return "a file"
	}
	return fmt.Sprintf("SourceKind(%d)", int(k))
}

// topicScheme prefixes an offsets topic in a source's text.
const topicScheme = "kafka:"

// Source is where a connector's offset is read from.
type Source struct {
	Kind SourceKind
	// URL is the REST API's base URL (SourceREST), Topic the offsets
	// topic, Path the file.
	URL   string
	Topic string
	Path  string
}

// ParseSource reads a source as an operator writes it: the REST API's URL
// (http://connect:8083, or a URL of the connector's own,
// http://connect:8083/connectors/<name>), kafka:<offsets topic>, or a
// file's path. name is the connector's name a connector URL gives, "" for
// the other forms.
func ParseSource(s string) (src Source, name string, err error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return src, "", errors.New("is empty")
	case strings.HasPrefix(s, "http://"), strings.HasPrefix(s, "https://"):
		u, err := url.Parse(s)
		if err == nil && u.User != nil {
			return src, "", fmt.Errorf("%s: put no credentials in the URL", u.Redacted())
		}
		if err != nil || u.Host == "" {
			return src, "", fmt.Errorf("%q is not a URL of Kafka Connect's REST API", withoutUserInfo(s))
		}
		// The connectors' list is the API's base too.
		path := strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/connectors")
		if i := strings.LastIndex(path, "/connectors/"); i >= 0 {
			name = strings.TrimSuffix(path[i+len("/connectors/"):], "/offsets")
			if name == "" || strings.Contains(name, "/") {
				return src, "", fmt.Errorf("%q: want the REST API's base URL or /connectors/<name>", s)
			}
			if name, err = url.PathUnescape(name); err != nil {
				return src, "", fmt.Errorf("%q: %w", s, err)
			}
			path = path[:i]
		}
		u.Path, u.RawQuery, u.Fragment = path, "", ""
		return Source{Kind: SourceREST, URL: u.String()}, name, nil
	case strings.HasPrefix(s, topicScheme):
		topic := strings.TrimPrefix(s, topicScheme)
		if topic == "" {
			return src, "", fmt.Errorf("%q names no topic: want kafka:<offset.storage.topic>", s)
		}
		return Source{Kind: SourceTopic, Topic: topic}, "", nil
	}
	return Source{Kind: SourceFile, Path: s}, "", nil
}

// withoutUserInfo is s, a URL that may not parse, with its user info (a
// password, as likely as not) cut out, for an error.
func withoutUserInfo(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	authority := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		return scheme + "://xxxxx@" + rest[at+1:]
	}
	return s
}

func (s Source) String() string {
	switch s.Kind {
	case SourceREST:
		return s.URL
	case SourceTopic:
		return topicScheme + s.Topic
	}
	return s.Path
}

// TopicReader reads every committed record of a topic, oldest first: the
// offsets topic's, from the Kafka cluster walstream writes to.
type TopicReader interface {
	ReadTopic(ctx context.Context, topic string, each func(key, value []byte)) error
}

// ErrConnectorRunning means Kafka Connect runs the connector: it would take
// its slot back whenever walstream lets go of it.
var ErrConnectorRunning = errors.New("the connector is running in Kafka Connect")

// Read reads the selected connector's offset from the source. A connector
// Kafka Connect's REST API reports running is refused: only a stopped
// connector (PUT /connectors/<name>/stop) or a deleted one leaves its slot
// for good.
func (s Source) Read(ctx context.Context, sel Selector, topics TopicReader, client *http.Client) (Offset, error) {
	switch s.Kind {
	case SourceREST:
		return s.readREST(ctx, sel, client)
	case SourceTopic:
		latest := make(Latest)
		if err := topics.ReadTopic(ctx, s.Topic, latest.Add); err != nil {
			return Offset{}, fmt.Errorf("reading Kafka Connect's offsets topic %s: %w", s.Topic, err)
		}
		return latest.Choose(sel, "offsets topic "+s.Topic)
	}
	b, err := os.ReadFile(s.Path)
	if errors.Is(err, os.ErrNotExist) {
		return Offset{}, fmt.Errorf("%w: %s does not exist: a standalone worker writes its offsets file at its first offset flush, "+
			"so a connector stopped before that stored none (or the path is wrong)", ErrNoOffset, s.Path)
	}
	if err != nil {
		return Offset{}, fmt.Errorf("reading Debezium's offset: %w", err)
	}
	return ParseFile(b, sel, s.Path)
}

// ParseFile reads a file holding offsets: a saved answer of the REST
// endpoint (JSON) or a standalone worker's offsets file.
func ParseFile(b []byte, sel Selector, where string) (Offset, error) {
	if len(b) == 0 {
		// A standalone worker rewrites its offsets file in place at each
		// flush, so one killed during one may leave it empty; Kafka
		// Connect reads an empty file as holding no offsets.
		return Offset{}, fmt.Errorf("%w: %s is empty, as a standalone worker killed while it rewrote its offsets leaves it", ErrNoOffset, where)
	}
	if IsOffsetsFile(b) {
		return ParseOffsetsFile(b, sel, where)
	}
	return ParseREST(b, sel, where)
}

// readREST asks the connector's status, then its offsets.
func (s Source) readREST(ctx context.Context, sel Selector, client *http.Client) (Offset, error) {
	if sel.Connector == "" {
		return Offset{}, fmt.Errorf("reading offsets from %s needs the connector's name", s.URL)
	}
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	base := s.URL + "/connectors/" + url.PathEscape(sel.Connector)
	var status struct {
		Connector struct {
			State string `json:"state"`
		} `json:"connector"`
		Tasks []struct {
			State string `json:"state"`
		} `json:"tasks"`
	}
	b, err := get(ctx, client, base+"/status")
	if err == nil {
		err = json.Unmarshal(b, &status)
	}
	if err != nil {
		return Offset{}, fmt.Errorf("reading the status of connector %s from %s: %w", sel.Connector, s.URL, err)
	}
	running := status.Connector.State
	for _, t := range status.Tasks {
		if t.State == "RUNNING" {
			running = "RUNNING"
		}
	}
	switch running {
	case "RUNNING", "PAUSED", "RESTARTING", "UNASSIGNED":
		return Offset{}, fmt.Errorf("%w: connector %s is %s: stop it first with PUT %s/stop, "+
			"so that it stores its last offset and lets go of its slot for good",
			ErrConnectorRunning, sel.Connector, running, base)
	}
	b, err = get(ctx, client, base+"/offsets")
	if err != nil {
		return Offset{}, fmt.Errorf("reading the offsets of connector %s: %w", sel.Connector, err)
	}
	o, err := ParseREST(b, sel, base+"/offsets")
	o.Connector = sel.Connector
	return o, err
}

func get(ctx context.Context, client *http.Client, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %.300s", u, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}
