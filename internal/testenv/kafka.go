package testenv

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// javaDir is where scripts/deps.sh installs the Java servers, one folder
// per name and version; WALSTREAM_JAVA_DIR overrides it, as it does for
// the script.
const javaDir = "/opt/walstream-java"

// JavaDir is the folder of the Java servers scripts/deps.sh installed.
func JavaDir() string {
	if d := os.Getenv("WALSTREAM_JAVA_DIR"); d != "" {
		return d
	}
	return javaDir
}

// JavaVersions returns the pinned versions of scripts/java/versions.env,
// the one place they are written, by name (KAFKA_VERSION, ...).
func JavaVersions() (map[string]string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(root, "scripts", "java", "versions.env")
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the pinned Java server versions: %w", err)
	}
	defer f.Close()
	versions := make(map[string]string)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%s: line %q is not NAME=version", path, line)
		}
		versions[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return versions, nil
}

// ModuleRoot is the directory of this module's go.mod, found from the
// working directory up (tests run in their package's directory).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the module root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("finding the module root: no go.mod above the working directory")
		}
		dir = parent
	}
}

// KafkaConfig says which Apache Kafka LaunchKafka starts.
type KafkaConfig struct {
	// Classic runs Kafka 3.9 (KAFKA_CLASSIC_VERSION), which speaks only
	// the classic transaction protocol, instead of the newest 4.x.
	Classic bool
	// Nodes is the number of nodes, each a broker and a KRaft controller:
	// 1 (when 0), or 3 for a cluster with replication factor 3,
	// min.insync.replicas=2 and no unclean leader election.
	Nodes int
	// Controllers adds that many controller-only nodes (KRaft voters
	// without a broker) to the quorum the Nodes form. Three nodes alone
	// lose their quorum when two are down: with no active controller no
	// leader is elected and no ISR shrinks, so the last broker times
	// produce requests out instead of refusing them NOT_ENOUGH_REPLICAS.
	// With two controllers beside three nodes, five voters, the quorum
	// survives two brokers down.
	Controllers int
	// Features are `StorageTool format --feature` values, e.g.
	// "transaction.version=1": a 4.x cluster formatted without one runs
	// transaction version 2.
	Features []string
	// Props are server properties that override the harness's, e.g.
	// "auto.create.topics.enable": "false".
	Props map[string]string
	// Advertise, when set, gives the address clients are told for a
	// broker's client listener (a proxy in front of it); the broker listens
	// on its own port either way.
	Advertise func(node int) string
	// Heap is the JVM's -Xmx; 512m when empty.
	Heap string
	// JVM are the JVM's flags besides the heap; when nil, G1 with only
	// the quick first JIT tier (C1), which halves a node's CPU to start,
	// and the release's class data archive (classArchive), which halves
	// its time to start: tests are not benchmarks. A benchmark passes
	// what kafka-server-start.sh uses.
	JVM []string
	// Output, when set, gets every node's log.
	Output io.Writer
	// Security, when set, adds a second client listener that speaks TLS,
	// SASL or both, and may turn the authorizer on. The PLAINTEXT
	// listener stays for the harness's own readers and for inter-broker
	// traffic; with an authorizer its principal, User:ANONYMOUS, is a
	// super user.
	Security *KafkaSecurity
}

// KafkaSecurity is a cluster's secured listener (KafkaNode.SecurePort).
type KafkaSecurity struct {
	// CertFile and KeyFile (PEM, as CA.Issue writes them) make the
	// listener speak TLS, from a PEM keystore.
	CertFile, KeyFile string
	// ClientCAFile, when set, is a PEM truststore: the listener requires a
	// client certificate (mutual TLS) issued by one of its CAs. The broker
	// reads it when it starts, so a test can rewrite it before a restart
	// to trust other clients.
	ClientCAFile string
	// ScramUsers are created at format time (StorageTool --add-scram) for
	// SCRAM-SHA-256 and SCRAM-SHA-512, by name; with any, the listener
	// speaks SASL.
	ScramUsers map[string]string
	// JWKSURL, when set, has the listener take OAUTHBEARER tokens: JWTs
	// checked against the keys served there (Kafka's
	// OAuthBearerValidatorCallbackHandler); the URL is allow-listed with
	// the JVM property org.apache.kafka.sasl.oauthbearer.allowed.urls,
	// which Kafka 4.x requires. A token's sub claim is its principal.
	JWKSURL string
	// Authorizer turns on KRaft's StandardAuthorizer, with SuperUsers
	// (principals such as "User:admin") besides User:ANONYMOUS.
	Authorizer bool
	SuperUsers []string
}

// protocol is the listener's security protocol.
func (s *KafkaSecurity) protocol() string {
	p := "SASL_"
	if len(s.ScramUsers) == 0 && s.JWKSURL == "" {
		p = ""
	}
	if s.CertFile != "" {
		return p + "SSL"
	}
	if p == "" {
		return "PLAINTEXT"
	}
	return p + "PLAINTEXT"
}

// Kafka is an Apache Kafka cluster in KRaft mode on loopback, each node a
// JVM child process with its data in a folder of its own, so that a node
// can be stopped, killed, paused and started again with its data.
type Kafka struct {
	Version     string // the Apache Kafka release
	Dir         string
	nodes       []*KafkaNode // the brokers
	controllers []*KafkaNode // controller-only nodes
	cfg         KafkaConfig
}

// KafkaNode is one node of a Kafka cluster.
type KafkaNode struct {
	ID   int
	Port int // the client listener's
	// SecurePort is the listener KafkaConfig.Security describes, 0
	// without one.
	SecurePort int
	// ControllerPort is the KRaft controller listener's.
	ControllerPort int
	// ControllerOnly: a KRaft voter without a broker, which serves no
	// clients (Port is 0).
	ControllerOnly bool
	dir            string
	java           []string // the command line, less the properties file
	out            io.Writer

	mu sync.Mutex
	p  *Process
}

// StartKafka formats and starts a Kafka cluster, stopped and removed at the
// end of the test. A cluster that cannot start skips the test, or fails it
// under CI.
func StartKafka(t testing.TB, cfg KafkaConfig) *Kafka {
	t.Helper()
	return StartKafkaAsync(t, cfg)()
}

// logNodes shows the end of each node's log, for a failed test.
func (k *Kafka) logNodes(t testing.TB) {
	for _, n := range k.all() {
		if p := n.proc(); p != nil {
			t.Logf("kafka node %d log (last 40 lines):\n%s", n.ID, p.LastLines(40))
		}
	}
}

// LaunchKafka is StartKafka for callers outside a test (the chaos suite,
// walbench): it returns errors, and the caller ends the cluster with Close.
func LaunchKafka(ctx context.Context, cfg KafkaConfig) (*Kafka, error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = 1
	}
	if cfg.Nodes != 1 && cfg.Nodes != 3 {
		return nil, fmt.Errorf("a Kafka cluster of %d nodes: the harness runs 1 or 3", cfg.Nodes)
	}
	versions, err := JavaVersions()
	if err != nil {
		return nil, err
	}
	version := versions["KAFKA_VERSION"]
	if cfg.Classic {
		version = versions["KAFKA_CLASSIC_VERSION"]
	}
	libs := filepath.Join(JavaDir(), "kafka-"+version, "libs")
	if _, err := os.Stat(filepath.Join(JavaDir(), "kafka-"+version, "installed")); err != nil {
		return nil, fmt.Errorf("finding Apache Kafka %s in %s (run scripts/deps.sh): %w", version, libs, err)
	}
	java, err := javaBinary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "walstream-kafka-")
	if err != nil {
		return nil, fmt.Errorf("creating the Kafka directory: %w", err)
	}
	k := &Kafka{Version: version, Dir: dir, cfg: cfg}
	heap := cfg.Heap
	if heap == "" {
		heap = "512m"
	}
	jvm := cfg.JVM
	if jvm == nil {
		jvm = kafkaJVM
		archive := classArchive("kafka-"+version, java, []string{libs}, []string{"-cp", libs + "/*"}, func(dump string) error {
			return trainKafka(ctx, cfg.Classic, dump)
		})
		if archive != "" {
			jvm = append(slices.Clip(jvm), archive)
		}
	}
	if sec := cfg.Security; sec != nil && sec.JWKSURL != "" {
		jvm = append(slices.Clip(jvm), "-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls="+sec.JWKSURL)
	}
	log4j := filepath.Join(dir, "log4j2.properties")
	if err := os.WriteFile(log4j, []byte(kafkaLog4j), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("writing Kafka's log configuration: %w", err)
	}
	for id := 1; id <= cfg.Nodes+cfg.Controllers; id++ {
		n := &KafkaNode{ID: id, ControllerOnly: id > cfg.Nodes, dir: filepath.Join(dir, fmt.Sprintf("node%d", id)), out: cfg.Output}
		n.java = append(append([]string{java, "-Xms" + heap, "-Xmx" + heap}, jvm...),
			"-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
			"-Dlog4j2.configurationFile=file:"+log4j, "-Dkafka.logs.dir="+filepath.Join(n.dir, "logs"),
			"-cp", libs+"/*")
		if n.ControllerOnly {
			k.controllers = append(k.controllers, n)
		} else {
			k.nodes = append(k.nodes, n)
		}
	}
	if err := k.firstStart(ctx); err != nil {
		k.Close()
		return nil, err
	}
	return k, nil
}

// kafkaJVM are a node's JVM flags by default: G1 with only the quick
// first JIT tier (C1), which halves a node's CPU to start.
var kafkaJVM = []string{"-XX:+UseG1GC", "-XX:TieredStopAtLevel=1"}

// trainKafka starts a one-node cluster of the newest release (of the 3.9
// release when classic) with the JVM flag dump and stops it cleanly, so
// that its JVM writes the class data archive (classArchive).
func trainKafka(ctx context.Context, classic bool, dump string) error {
	k, err := LaunchKafka(ctx, KafkaConfig{Classic: classic, JVM: append(slices.Clip(kafkaJVM), dump)})
	if err != nil {
		return err
	}
	defer k.Close()
	k.Stop(syscall.SIGTERM)
	return nil
}

// kafkaLog4j logs warnings and the line that says a node started.
const kafkaLog4j = `appender.out.type=Console
appender.out.name=OUT
appender.out.layout.type=PatternLayout
appender.out.layout.pattern=[%d] %p %m (%c)%n
rootLogger.level=WARN
rootLogger.appenderRef.out.ref=OUT
logger.srv.name=kafka.server.KafkaRaftServer
logger.srv.level=INFO
`

// kafkaStarted is what a node logs once it serves clients
// (KafkaRaftServer's STARTED_MESSAGE, in 3.9 and 4.x).
const kafkaStarted = "Kafka Server started"

func javaBinary() (string, error) {
	if home := os.Getenv("JAVA_HOME"); home != "" {
		return filepath.Join(home, "bin", "java"), nil
	}
	path, err := exec.LookPath("java")
	if err != nil {
		return "", fmt.Errorf("finding java to run Kafka (run scripts/deps.sh): %w", err)
	}
	return path, nil
}

// firstStart picks ports, formats every node and starts the cluster; should
// a port have been taken, the whole cluster moves to new ones
// (startOnFreePort).
func (k *Kafka) firstStart(ctx context.Context) error {
	return startOnFreePort(func(retry bool) error {
		if retry {
			k.Stop(syscall.SIGKILL)
			for _, n := range k.all() {
				if err := os.RemoveAll(n.dir); err != nil {
					return err
				}
			}
		}
		if err := k.format(ctx); err != nil {
			return err
		}
		return k.Start()
	})
}

// format writes each node's server.properties on new ports and formats its
// storage with one cluster id.
func (k *Kafka) format(ctx context.Context) error {
	for _, n := range k.all() {
		var err error
		if !n.ControllerOnly {
			if n.Port, err = PickPort(); err != nil {
				return err
			}
		}
		if n.ControllerPort, err = PickPort(); err != nil {
			return err
		}
		if k.cfg.Security != nil {
			if n.SecurePort, err = PickPort(); err != nil {
				return err
			}
		}
	}
	if err := k.writeKeystore(); err != nil {
		return err
	}
	id := clusterID()
	for _, n := range k.all() {
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return fmt.Errorf("creating the folder of Kafka node %d: %w", n.ID, err)
		}
		if err := os.WriteFile(n.propsFile(), []byte(k.serverProps(n)), 0o644); err != nil {
			return fmt.Errorf("writing the properties of Kafka node %d: %w", n.ID, err)
		}
		args := []string{"format", "-t", id, "-c", n.propsFile()}
		for _, f := range k.cfg.Features {
			args = append(args, "--feature", f)
		}
		if sec := k.cfg.Security; sec != nil {
			for _, name := range slices.Sorted(maps.Keys(sec.ScramUsers)) {
				for _, m := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
					args = append(args, "--add-scram", fmt.Sprintf("%s=[name=%s,password=%s]", m, name, sec.ScramUsers[name]))
				}
			}
		}
		if _, err := k.tool(ctx, args...); err != nil {
			return fmt.Errorf("formatting Kafka node %d: %w", n.ID, err)
		}
	}
	return nil
}

// clusterID is a new cluster id as `StorageTool random-uuid` makes one
// (Kafka's Uuid: 16 random bytes in unpadded URL-safe base64, never
// starting with '-'), without a JVM to start.
func clusterID() string {
	for {
		var b [16]byte
		_, _ = rand.Read(b[:])
		if id := base64.RawURLEncoding.EncodeToString(b[:]); id[0] != '-' {
			return id
		}
	}
}

// tool runs kafka.tools.StorageTool and returns what it printed.
func (k *Kafka) tool(ctx context.Context, args ...string) (string, error) {
	java := withoutDump(k.nodes[0].java) // a training run's archive is the node's
	cmd := exec.CommandContext(ctx, java[0], append(append(java[1:], "kafka.tools.StorageTool"), args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("kafka.tools.StorageTool %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// serverProps is a node's server.properties: a combined broker and
// controller on loopback, with the cluster's durability settings.
func (k *Kafka) serverProps(n *KafkaNode) string {
	rf, isr := "1", "1"
	if len(k.nodes) == 3 {
		rf, isr = "3", "2"
	}
	var voters []string
	for _, o := range k.all() {
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", o.ID, o.ControllerPort))
	}
	advertised := fmt.Sprintf("127.0.0.1:%d", n.Port)
	if k.cfg.Advertise != nil && !n.ControllerOnly {
		advertised = k.cfg.Advertise(n.ID)
	}
	props := map[string]string{
		"process.roles":                            "broker,controller",
		"node.id":                                  strconv.Itoa(n.ID),
		"controller.quorum.voters":                 strings.Join(voters, ","),
		"listeners":                                fmt.Sprintf("PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", n.Port, n.ControllerPort),
		"advertised.listeners":                     "PLAINTEXT://" + advertised,
		"inter.broker.listener.name":               "PLAINTEXT",
		"controller.listener.names":                "CONTROLLER",
		"listener.security.protocol.map":           "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
		"log.dirs":                                 n.DataDir(),
		"num.partitions":                           "3",
		"default.replication.factor":               rf,
		"min.insync.replicas":                      isr,
		"offsets.topic.replication.factor":         rf,
		"offsets.topic.num.partitions":             "3",
		"transaction.state.log.replication.factor": rf,
		"transaction.state.log.min.isr":            isr,
		"transaction.state.log.num.partitions":     "3",
		"unclean.leader.election.enable":           "false",
		// Leaders moved by a test stay where it put them.
		"auto.leader.rebalance.enable":     "false",
		"group.initial.rebalance.delay.ms": "0",
		"auto.create.topics.enable":        "true",
		"num.network.threads":              "2",
		"num.io.threads":                   "2",
	}
	if !k.cfg.Classic {
		props["share.coordinator.state.topic.replication.factor"] = rf
		props["share.coordinator.state.topic.min.isr"] = isr
	}
	if sec := k.cfg.Security; sec != nil {
		k.secureProps(props, n, sec)
	}
	if n.ControllerOnly {
		// A controller-only node keeps the cluster's settings: the
		// active controller applies the topic defaults, unclean leader
		// election and leader rebalancing, whichever node it is.
		props["process.roles"] = "controller"
		props["listeners"] = fmt.Sprintf("CONTROLLER://127.0.0.1:%d", n.ControllerPort)
		delete(props, "advertised.listeners")
		delete(props, "inter.broker.listener.name")
	}
	return propsText(props, k.cfg.Props)
}

// propsText is a properties file of props, with over's values replacing
// theirs.
func propsText(props, over map[string]string) string {
	maps.Copy(props, over)
	var b strings.Builder
	for _, key := range slices.Sorted(maps.Keys(props)) {
		fmt.Fprintf(&b, "%s=%s\n", key, props[key])
	}
	return b.String()
}

func (n *KafkaNode) propsFile() string { return filepath.Join(n.dir, "server.properties") }

// secureProps adds the CLIENT listener that sec describes.
func (k *Kafka) secureProps(props map[string]string, n *KafkaNode, sec *KafkaSecurity) {
	const l = "listener.name.client."
	props["listeners"] += fmt.Sprintf(",CLIENT://127.0.0.1:%d", n.SecurePort)
	props["advertised.listeners"] += fmt.Sprintf(",CLIENT://127.0.0.1:%d", n.SecurePort)
	props["listener.security.protocol.map"] += ",CLIENT:" + sec.protocol()
	if sec.CertFile != "" {
		props[l+"ssl.keystore.type"] = "PEM"
		props[l+"ssl.keystore.location"] = k.keystore()
	}
	if sec.ClientCAFile != "" {
		props[l+"ssl.client.auth"] = "required"
		props[l+"ssl.truststore.type"] = "PEM"
		props[l+"ssl.truststore.location"] = sec.ClientCAFile
	}
	var mechs []string
	if len(sec.ScramUsers) > 0 {
		mechs = append(mechs, "SCRAM-SHA-256", "SCRAM-SHA-512")
		for _, m := range []string{"scram-sha-256", "scram-sha-512"} {
			props[l+m+".sasl.jaas.config"] = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
		}
	}
	if sec.JWKSURL != "" {
		mechs = append(mechs, "OAUTHBEARER")
		props[l+"oauthbearer.sasl.jaas.config"] = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
		props[l+"oauthbearer.sasl.server.callback.handler.class"] = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
		props["sasl.oauthbearer.jwks.endpoint.url"] = sec.JWKSURL
		props["sasl.oauthbearer.expected.audience"] = OIDCAudience
		props["sasl.oauthbearer.expected.issuer"] = OIDCIssuer
	}
	if len(mechs) > 0 {
		props[l+"sasl.enabled.mechanisms"] = strings.Join(mechs, ",")
	}
	if sec.Authorizer {
		props["authorizer.class.name"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
		props["super.users"] = strings.Join(append([]string{"User:ANONYMOUS"}, sec.SuperUsers...), ";")
	}
}

// keystore is the PEM keystore of the secured listener: the key in PKCS #8,
// which Kafka's PEM keystores require, then the certificate.
func (k *Kafka) keystore() string { return filepath.Join(k.Dir, "keystore.pem") }

func (k *Kafka) writeKeystore() error {
	sec := k.cfg.Security
	if sec == nil || sec.CertFile == "" {
		return nil
	}
	pemKey, err := os.ReadFile(sec.KeyFile)
	if err != nil {
		return fmt.Errorf("reading the Kafka listener's key: %w", err)
	}
	key, err := pkcs8(pemKey)
	if err != nil {
		return fmt.Errorf("reading the Kafka listener's key %s: %w", sec.KeyFile, err)
	}
	cert, err := os.ReadFile(sec.CertFile)
	if err != nil {
		return fmt.Errorf("reading the Kafka listener's certificate: %w", err)
	}
	return os.WriteFile(k.keystore(), append(key, cert...), 0o600)
}

// SecureAddr is the bootstrap address list of the listener
// KafkaConfig.Security describes.
func (k *Kafka) SecureAddr() string {
	addrs := make([]string, len(k.nodes))
	for i, n := range k.nodes {
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", n.SecurePort)
	}
	return strings.Join(addrs, ",")
}

// Addr is the bootstrap address list, comma-separated.
func (k *Kafka) Addr() string {
	addrs := make([]string, len(k.nodes))
	for i, n := range k.nodes {
		addrs[i] = n.Addr()
	}
	return strings.Join(addrs, ",")
}

// Nodes are the cluster's brokers, by id from 1.
func (k *Kafka) Nodes() []*KafkaNode { return k.nodes }

// Controllers are the cluster's controller-only nodes, numbered after the
// brokers.
func (k *Kafka) Controllers() []*KafkaNode { return k.controllers }

// all are the brokers and the controller-only nodes.
func (k *Kafka) all() []*KafkaNode { return append(slices.Clip(k.nodes), k.controllers...) }

// Node is the node with the given id, a broker or a controller.
func (k *Kafka) Node(id int) *KafkaNode { return k.all()[id-1] }

// String names the release and the transaction protocol it runs.
func (k *Kafka) String() string {
	s := "Apache Kafka " + k.Version
	if len(k.nodes) > 1 {
		s += fmt.Sprintf(", %d nodes", len(k.nodes))
	}
	if len(k.controllers) > 0 {
		s += fmt.Sprintf(", %d controllers", len(k.controllers))
	}
	for _, f := range k.cfg.Features {
		s += ", " + f
	}
	return s
}

// Start starts every node that is not running and waits until the
// cluster serves clients: each node logged that it started and the
// metadata names every broker.
func (k *Kafka) Start() error {
	var wg sync.WaitGroup
	all := k.all()
	errs := make([]error, len(all))
	for i, n := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = n.Start()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return k.WaitBrokers(context.Background(), len(k.nodes), 90*time.Second)
}

// WaitBrokers waits until the cluster's metadata names n live brokers.
func (k *Kafka) WaitBrokers(ctx context.Context, n int, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(k.Addr(), ",")...))
	if err != nil {
		return fmt.Errorf("connecting to Kafka: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var last error
	for {
		md, err := adm.BrokerMetadata(ctx)
		if err == nil && len(md.Brokers) >= n {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("%d of %d brokers in the metadata", len(md.Brokers), n)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d Kafka brokers at %s: %w", n, k.Addr(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop ends every node with sig (SIGTERM: a controlled shutdown; SIGKILL:
// a crash), all at once, and waits for them to exit.
func (k *Kafka) Stop(sig syscall.Signal) {
	var wg sync.WaitGroup
	for _, n := range k.all() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.Stop(sig)
		}()
	}
	wg.Wait()
}

// Restart stops every node with sig and starts the cluster again with its
// data.
func (k *Kafka) Restart(sig syscall.Signal) error {
	k.Stop(sig)
	return k.Start()
}

// Close kills every node and removes the cluster's data.
func (k *Kafka) Close() {
	k.Stop(syscall.SIGKILL)
	os.RemoveAll(k.Dir)
}

// Addr is the node's client address.
func (n *KafkaNode) Addr() string { return fmt.Sprintf("127.0.0.1:%d", n.Port) }

func (n *KafkaNode) proc() *Process {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.p
}

// Pid is the process id of the node's JVM, 0 when it never started.
func (n *KafkaNode) Pid() int {
	if p := n.proc(); p != nil {
		return p.Pid()
	}
	return 0
}

// Running reports whether the node's process runs (it may be paused).
func (n *KafkaNode) Running() bool {
	p := n.proc()
	return p != nil && !p.Exited()
}

// Start starts the node, if it is not running, and waits up to 90 s for it
// to log that it serves clients.
func (n *KafkaNode) Start() error {
	if n.Running() {
		return nil
	}
	args := append(n.java[1:len(n.java):len(n.java)], "kafka.Kafka", n.propsFile())
	p, err := StartProcess(ProcessConfig{Name: fmt.Sprintf("kafka-%d", n.ID), Path: n.java[0], Args: args, Output: n.out})
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.p = p
	n.mu.Unlock()
	if err := p.WaitLog(context.Background(), kafkaStarted, 90*time.Second); err != nil {
		p.Kill()
		return fmt.Errorf("starting Kafka node %d on %s: %w", n.ID, n.Addr(), err)
	}
	return nil
}

// Stop ends the node with sig and waits for it to exit: up to 60 s after
// SIGTERM (a controlled shutdown moves leaders away first), then it is
// killed.
func (n *KafkaNode) Stop(sig syscall.Signal) {
	if p := n.proc(); p != nil {
		p.Signal(syscall.SIGCONT) // a paused node cannot stop
		_ = p.Stop(sig, 60*time.Second)
	}
}

// Pause stops the node's process (SIGSTOP) without ending it: it keeps
// its connections and answers nothing, as a hung broker does.
func (n *KafkaNode) Pause() {
	if p := n.proc(); p != nil {
		p.Signal(syscall.SIGSTOP)
	}
}

// Resume continues a paused node.
func (n *KafkaNode) Resume() {
	if p := n.proc(); p != nil {
		p.Signal(syscall.SIGCONT)
	}
}

// DataDir is the node's log.dirs: a directory per partition it holds.
func (n *KafkaNode) DataDir() string { return filepath.Join(n.dir, "data") }

// Log is everything the node's current process logged.
func (n *KafkaNode) Log() string {
	if p := n.proc(); p != nil {
		return p.Log()
	}
	return ""
}

// StartKafkaAsync starts a Kafka cluster as StartKafka does, in the
// background, so that a test can start Postgres meanwhile; the function
// it returns waits for the cluster.
func StartKafkaAsync(t testing.TB, cfg KafkaConfig) func() *Kafka {
	t.Helper()
	return startAsync(t, func() (*Kafka, error) { return LaunchKafka(context.Background(), cfg) })
}
