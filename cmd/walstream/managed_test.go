package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"github.com/walstream/walstream/config"
	"github.com/walstream/walstream/internal/testenv"
	"github.com/walstream/walstream/kafka"
	"go.yaml.in/yaml/v3"
)

// prepared creates the outbox table, the publication and the slot in
// database db, so that rows inserted before walstream first runs are
// streamed.
func prepared(e *env, db, slot string) {
	e.pg.Exec(db, outboxDDL)
	e.pg.Exec(db, "CREATE PUBLICATION walstream_outbox FOR TABLE public.outbox WITH (publish = 'insert')")
	e.pg.Exec(db, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", slot))
}

// adminOn is a kadm client on a cluster's PLAINTEXT listener, whose
// principal the harness makes a super user.
func adminOn(t *testing.T, k *testenv.Kafka) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(k.Addr(), ",")...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// TestOAuthBearer: walstream authenticates to Kafka with OAUTHBEARER JWTs
// that the broker checks against the test's JWKS endpoint, first from a
// token file, then from a client-credentials token endpoint whose tokens
// live 8 s: the broker makes clients re-authenticate every 3 s, tokens are
// renewed halfway through their life, and the stream goes on past the
// first token's expiry in one session, every row once.
func TestOAuthBearer(t *testing.T) {
	t.Parallel()
	const clientSecret = "oidc-client-Sekr1t"
	registerSecret(clientSecret)
	idp := testenv.StartOIDC(t, time.Hour, map[string]string{"walstream": clientSecret})
	startKafka := testenv.StartKafkaAsync(t, testenv.KafkaConfig{Security: &testenv.KafkaSecurity{JWKSURL: idp.JWKSURL},
		Props: map[string]string{"connections.max.reauth.ms": "3000"}})
	e := &env{t: t, pg: testenv.StartPostgres(t)}
	prepared(e, "postgres", "walstream")
	k := startKafka()
	e.kafka, e.broker = k, k.SecureAddr()
	e.reader = []kgo.Opt{kgo.SASL(oauth.Oauth(func(context.Context) (oauth.Auth, error) {
		tok, _, err := idp.Sign("reader", time.Hour)
		return oauth.Auth{Token: tok}, err
	}))}

	tokenFile := filepath.Join(t.TempDir(), "token")
	tok, _, err := idp.Sign("walstream", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(tokenFile, []byte(tok), 0o600)
	seq := 0
	e.insertTx("Order", 20, 4, &seq, false)
	p := e.start([]string{"--kafka-sasl-mechanism", "OAUTHBEARER", "--kafka-oauth-token-file", tokenFile}).streaming(t)
	e.waitConfirmed("walstream", e.currentLSN(), 30*time.Second, p)
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}

	idp.SetLifetime(8 * time.Second)
	p = e.start([]string{"--kafka-sasl-mechanism", "OAUTHBEARER", "--kafka-oauth-token-url", idp.TokenURL,
		"--kafka-oauth-client-id", "walstream", "--kafka-oauth-client-secret-file", secretFile(t, clientSecret)}).streaming(t)
	var first time.Time
	for deadline := time.Now().Add(time.Minute); ; {
		e.insertTx("Order", 5, 4, &seq, false)
		if issued := idp.Issued(); len(issued) > 0 {
			first = issued[0]
			if time.Now().After(first.Add(3*time.Second)) && len(issued) >= 3 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("tokens issued: %v; want the stream to outlive the first", idp.Issued())
		}
		time.Sleep(500 * time.Millisecond)
	}
	e.waitConfirmed("walstream", e.currentLSN(), 30*time.Second, p)
	issued := idp.Issued()
	t.Logf("%d tokens of 8 s issued in one session; the first expired at %s", len(issued), first.Format(time.RFC3339))
	if log := p.Log(); strings.Contains(log, "session ended") || strings.Contains(log, "OAUTHBEARER:") || strings.Contains(log, "level=ERROR") {
		t.Fatalf("the session did not go on past the first token's expiry untroubled:\n%s", log)
	}
	e.checkExactlyOnce(e.readAll("Order"), "outbox.event.")

	// A refused client secret stops nothing silently: walstream says
	// which mechanism and endpoint refused, never the secret.
	p.stop()
	p = e.start([]string{"--kafka-sasl-mechanism", "OAUTHBEARER", "--kafka-oauth-token-url", idp.TokenURL,
		"--kafka-oauth-client-id", "walstream", "--kafka-oauth-client-secret-file", secretFile(t, "not-the-secret")})
	p.waitLog(t, "OAUTHBEARER: fetching a token from "+idp.TokenURL+" for client walstream", 30*time.Second)
	p.waitLog(t, "invalid_client", time.Second)
}

// TestKafkaACLs: on a cluster with the StandardAuthorizer, SCRAM users and
// no auto-creation, walstream streams with exactly the ACLs `walstream init
// --kafka-acls` prints; without any one of the required ones it stops with
// an error naming the operation and the resource, having confirmed nothing
// past what Kafka holds; without the optional one it warns. A process of a
// fleet needs its fleet's group's too, which init prints then.
func TestKafkaACLs(t *testing.T) {
	t.Parallel()
	const password, adminPassword = "walstream-acl-Sekr1t", "admin-acl-Sekr1t"
	registerSecret(password)
	startKafka := testenv.StartKafkaAsync(t, testenv.KafkaConfig{
		Security: &testenv.KafkaSecurity{ScramUsers: map[string]string{"walstream": password, "admin": adminPassword},
			Authorizer: true, SuperUsers: []string{"User:admin"}},
		Props: map[string]string{"auto.create.topics.enable": "false"}})
	e := &env{t: t, pg: testenv.StartPostgres(t)}
	prepared(e, "postgres", "walstream")
	k := startKafka()
	e.kafka, e.broker = k, k.SecureAddr()
	e.reader = []kgo.Opt{kgo.SASL(scram.Auth{User: "admin", Pass: adminPassword}.AsSha512Mechanism())}
	adm := adminOn(t, k)
	ctx := context.Background()

	args := []string{"--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", "walstream",
		"--on-error", "dead-letter", "--topic-creation", "default.partitions=2;default.retention.ms=86400000"}
	env := "WALSTREAM_KAFKA_SASL_PASSWORD=" + password
	initArgs := append([]string{"init", "--kafka-acls", "--kafka-principal", "User:walstream",
		"--pg-url", e.pg.URL("postgres", "postgres"), "--kafka-brokers", e.broker}, args...)
	cmd := exec.Command(binary, initArgs...)
	cmd.Env = append(os.Environ(), env)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("walstream init --kafka-acls: %v\n%s", err, out)
	}
	// The ACLs init printed, as its settings give them; the password from
	// a file, since the environment is the process's.
	cfg, err := config.Parse(config.Command{Name: "init", Needs: func() (bool, bool) { return false, false }},
		append(initArgs[4:len(initArgs):len(initArgs)], "--kafka-sasl-password-file", secretFile(t, password)), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var acls []*kadm.ACLBuilder // one per operation, as printed
	type grant struct {
		kafka.ACL
		op string
	}
	var grants []grant
	for _, a := range cfg.KafkaACLs() {
		line := fmt.Sprintf("--allow-principal User:walstream --operation %s", strings.Join(a.Ops, " --operation "))
		if !strings.Contains(string(out), line) || !strings.Contains(string(out), a.Name) {
			t.Errorf("init --kafka-acls does not print %s on %s %s:\n%s", a.Ops, a.Resource, a.Name, out)
		}
		for _, op := range a.Ops {
			grants = append(grants, grant{a, op})
		}
	}
	// The KafkaUser init prints holds the same ACLs, as a set, as the ones
	// this test grants below.
	_, doc, _ := strings.Cut(string(out), "\n---\n")
	doc, _, _ = strings.Cut(doc, "\n---\n")
	var user strimziUser
	if err := yaml.Unmarshal([]byte(doc), &user); err != nil || user.Kind != "KafkaUser" || user.Metadata.Name != "walstream" {
		t.Fatalf("no KafkaUser for walstream in init's output (%v):\n%s", err, out)
	}
	var inUser, granted []string
	for _, a := range user.Spec.Authorization.ACLs {
		for _, op := range a.Operations {
			inUser = append(inUser, fmt.Sprintf("%s %s %s %s %s", a.Resource.Type, a.Resource.PatternType, a.Resource.Name, op, a.Host))
		}
	}
	for _, g := range grants {
		pattern := map[string]string{"literal": "literal", "prefixed": "prefix"}[g.Pattern]
		granted = append(granted, fmt.Sprintf("%s %s %s %s *", strimziTypes[g.Resource], pattern, g.Name, g.op))
	}
	slices.Sort(inUser)
	slices.Sort(granted)
	if !slices.Equal(slices.Compact(inUser), slices.Compact(granted)) || user.Spec.Authorization.Type != "simple" {
		t.Errorf("KafkaUser's ACLs:\n%s\nwant the ones granted:\n%s", strings.Join(inUser, "\n"), strings.Join(granted, "\n"))
	}
	builder := func(g grant) *kadm.ACLBuilder {
		b := kadm.NewACLs().Allow("User:walstream").AllowHosts("*")
		switch g.Resource {
		case "topic":
			b = b.Topics(g.Name)
		case "transactional-id":
			b = b.TransactionalIDs(g.Name)
		case "group":
			b = b.Groups(g.Name)
		}
		pattern := kadm.ACLPatternLiteral
		if g.Pattern == "prefixed" {
			pattern = kadm.ACLPatternPrefixed
		}
		op, err := kmsg.ParseACLOperation(g.op)
		if err != nil {
			t.Fatal(err)
		}
		return b.ResourcePatternType(pattern).Operations(op)
	}
	set := func(g grant, on bool) {
		t.Helper()
		var err error
		if on {
			_, err = adm.CreateACLs(ctx, builder(g))
		} else {
			_, err = adm.DeleteACLs(ctx, builder(g))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range grants {
		set(g, true)
		acls = append(acls, builder(g))
	}
	t.Logf("%d ACLs granted, as printed:\n%s", len(acls), out)

	seq := 0
	withheld := func(g grant, rows func()) {
		t.Helper()
		set(g, false)
		before := e.confirmedLSN("walstream")
		rows()
		lsn := e.currentLSN()
		p := e.start(args, env)
		if g.Optional {
			p.streaming(t)
			e.waitConfirmed("walstream", lsn, 30*time.Second, p)
			p.waitLog(t, "the DescribeConfigs ACL on topic "+g.Name, 10*time.Second)
			p.stop()
		} else {
			msg := exitMessage(t, p)
			wantAll(t, msg, "not authorized by the Kafka cluster", g.op, g.Name)
			if got := e.confirmedLSN("walstream"); got >= lsn || got < before {
				t.Errorf("without %s on %s: confirmed %s, want it from %s up to before %s", g.op, g.Name, got, before, lsn)
			}
			t.Logf("without %s on %s %s: %s", g.op, g.Resource, g.Name, msg)
		}
		set(g, true)
	}
	find := func(op, name string) grant {
		for _, g := range grants {
			if g.op == op && g.Name == name {
				return g
			}
		}
		t.Fatalf("no ACL %s on %s printed", op, name)
		return grant{}
	}
	// The checkpoint topic and the dead-letter topic are made by the first
	// run that needs them: their Create is withheld first.
	withheld(find("Create", "walstream.checkpoints"), func() { e.insertTx("Order", 3, 2, &seq, false) })
	badRows := 0
	bad := func() {
		e.pg.Exec("postgres", `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('bad type!', 'x', 'Created', '{}')`)
		badRows++
	}
	withheld(find("Create", "walstream.dlq"), bad)
	bad()
	p := e.start(args, env).streaming(t)
	e.waitConfirmed("walstream", e.currentLSN(), 30*time.Second, p)
	p.stop()
	for i, g := range grants {
		switch {
		case g.op == "Create" && g.Name != "outbox.event.":
			continue // done above: the topics exist now
		case g.Name == "walstream.dlq":
			withheld(g, bad)
		case g.op == "DescribeConfigs": // compared on an existing topic
			withheld(g, func() { e.insertTx("Order", 2, 1, &seq, false) })
		default: // a new topic each time
			typ := fmt.Sprintf("Acl%d", i)
			withheld(g, func() { e.insertTx(typ, 2, 1, &seq, false) })
		}
	}

	// A process of a fleet: Read on its group too, and nothing else.
	args = append(args, "--fleet", "on")
	cmd = exec.Command(binary, append(initArgs, "--fleet", "on")...)
	cmd.Env = append(os.Environ(), env)
	if out, err = cmd.CombinedOutput(); err != nil {
		t.Fatalf("walstream init --kafka-acls --fleet on: %v\n%s", err, out)
	}
	fleetCfg, err := config.Parse(config.Command{Name: "init", Needs: func() (bool, bool) { return false, false }},
		append(initArgs[4:len(initArgs):len(initArgs)], "--kafka-sasl-password-file", secretFile(t, password), "--fleet", "on"), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var fleetGrants []grant
	for _, a := range fleetCfg.KafkaACLs() {
		if !slices.ContainsFunc(grants, func(g grant) bool {
			return g.Resource == a.Resource && g.Name == a.Name && slices.Contains(a.Ops, g.op)
		}) {
			fleetGrants = append(fleetGrants, grant{a, a.Ops[0]})
		}
	}
	if len(fleetGrants) != 1 || fleetGrants[0].Resource != "group" || fleetGrants[0].op != "Read" || !strings.Contains(string(out), "--group "+fleetGrants[0].Name) {
		t.Fatalf("a fleet's ACLs add %+v, want Read on its group, printed:\n%s", fleetGrants, out)
	}
	set(fleetGrants[0], true)
	withheld(fleetGrants[0], func() { e.insertTx("Order", 2, 1, &seq, false) })

	p = e.start(args, env).streaming(t)
	e.waitConfirmed("walstream", e.currentLSN(), 30*time.Second, p)
	p.stop()
	if n := len(e.kcat("walstream.dlq")); n != badRows {
		t.Errorf("%d dead letters, want the %d bad rows", n, badRows)
	}
	e.pg.Exec("postgres", `DELETE FROM outbox WHERE aggregatetype = 'bad type!'`)
	var types []string
	for i := range grants {
		types = append(types, fmt.Sprintf("Acl%d", i))
	}
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var recs []record
	for _, typ := range append(types, "Order") {
		if topics.Has("outbox.event." + typ) {
			recs = append(recs, e.kcat("outbox.event."+typ)...)
		}
	}
	e.checkExactlyOnce(recs, "outbox.event.")
}

// TestTopicsWithoutAutoCreation: on a cluster with auto.create.topics.enable
// off, a record for a missing topic stops walstream with an error naming
// the topic and both ways out, confirming nothing past it, and status lists
// the topic; with --topic-creation walstream creates the outbox,
// dead-letter and checkpoint topics with the group's settings, and warns
// about an existing topic whose settings differ.
func TestTopicsWithoutAutoCreation(t *testing.T) {
	t.Parallel()
	startKafka := testenv.StartKafkaAsync(t, testenv.KafkaConfig{Props: map[string]string{"auto.create.topics.enable": "false"}})
	e := &env{t: t, pg: testenv.StartPostgres(t)}
	prepared(e, "postgres", "walstream")
	k := startKafka()
	e.kafka, e.broker = k, k.Addr()
	adm := adminOn(t, k)
	ctx := context.Background()

	seq := 0
	e.insertTx("Order", 4, 2, &seq, false)
	lsn := e.currentLSN()
	p := e.start(nil)
	wantAll(t, exitMessage(t, p), "topic outbox.event.Order: the topic does not exist and the cluster did not create it",
		"event id", "create the topic", "--topic-creation")
	if got := e.confirmedLSN("walstream"); got >= lsn {
		t.Errorf("confirmed %s, at or past the row at %s", got, lsn)
	}
	out, _ := exec.Command(binary, "status", "--pg-url", e.pg.URL("postgres", "postgres"), "--kafka-brokers", e.broker).CombinedOutput()
	wantAll(t, string(out), "missing", "outbox.event.Order", "--topic-creation")

	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "outbox.event.Customer"); err != nil {
		t.Fatal(err)
	}
	e.insertTx("Customer", 2, 1, &seq, false)
	e.pg.Exec("postgres", `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('bad type!', 'x', 'Created', '{}')`)
	p = e.start([]string{"--on-error", "dead-letter", "--checkpoint-topic", "walstream.positions", "--topic-creation",
		"default.partitions=2;default.retention.ms=3600000;groups=dlq;dlq.include=walstream\\.dlq;dlq.partitions=1;dlq.retention.ms=-1"}).streaming(t)
	e.waitConfirmed("walstream", e.currentLSN(), 30*time.Second, p)
	p.waitLog(t, `topic exists with other settings than its topic.creation group's`, 10*time.Second)
	p.waitLog(t, `topic=outbox.event.Customer topic_creation_group=default differences="1 partitions, the group says 2; retention.ms \"604800000\", the group says \"3600000\""`, time.Second)
	p.stop()
	for _, c := range []struct {
		topic, policy, retention string
		partitions               int
	}{
		{"outbox.event.Order", "delete", "3600000", 2},
		{"walstream.dlq", "delete", "-1", 1},
		{"walstream.positions", "compact", "3600000", 1},
	} {
		td, err := adm.ListTopics(ctx, c.topic)
		if err != nil {
			t.Fatal(err)
		}
		rcs, err := adm.DescribeTopicConfigs(ctx, c.topic)
		if err != nil {
			t.Fatal(err)
		}
		rc, _ := rcs.On(c.topic, nil)
		got := map[string]string{}
		for _, cf := range rc.Configs {
			got[cf.Key] = cf.MaybeValue()
		}
		if n := len(td[c.topic].Partitions); n != c.partitions || got["cleanup.policy"] != c.policy || got["retention.ms"] != c.retention {
			t.Errorf("%s: %d partitions, cleanup.policy %s, retention.ms %s; want %d, %s, %s", c.topic, n,
				got["cleanup.policy"], got["retention.ms"], c.partitions, c.policy, c.retention)
		}
	}
	if n := len(e.kcat("walstream.dlq")); n != 1 {
		t.Errorf("%d dead letters, want 1", n)
	}
	e.pg.Exec("postgres", `DELETE FROM outbox WHERE aggregatetype = 'bad type!'`)
	e.checkExactlyOnce(e.readAll("Order", "Customer"), "outbox.event.")
}

// TestManyStreams: three streams from two Postgres clusters on one Kafka:
// cluster A's databases postgres and billing (slots walstream and billing),
// and cluster B's postgres (slot walstream). A's billing stream first runs
// under the names earlier versions defaulted to, and keeps them at its
// defaults. B's stream at its defaults claims the
// checkpoint key of A's postgres stream and stops before fencing anything,
// naming both streams and --stream; with a name of its own it streams. A's
// stream goes on untouched; every row reaches its topic once.
func TestManyStreams(t *testing.T) {
	t.Parallel()
	broker := testenv.StartBrokerAsync(t, testenv.TestBroker())
	a := &env{t: t, pg: testenv.StartPostgres(t)}
	b := &env{t: t, pg: testenv.StartPostgres(t)}
	a.kafka = broker()
	a.broker = a.kafka.Addr()
	b.kafka, b.broker = a.kafka, a.broker
	a.pg.Exec("postgres", "CREATE DATABASE billing")
	prepared(a, "postgres", "walstream")
	prepared(a, "billing", "billing")
	prepared(b, "postgres", "walstream")
	billing := []string{"--pg-url", a.pg.URL("postgres", "billing"), "--slot", "billing"}

	seqA, seqBill, seqB := 0, 0, 0
	a.insertTxIn("billing", "Invoice", 10, 2, &seqBill, false)
	old := a.start(append(billing, "--checkpoint-key", "billing", "--transactional-id", "walstream-billing")).streaming(t)
	a.waitConfirmed("billing", a.currentLSN(), 30*time.Second, old)
	old.stop()

	pa := a.start(nil).streaming(t)
	a.insertTx("Order", 10, 2, &seqA, false)
	a.waitConfirmed("walstream", a.currentLSN(), 30*time.Second, pa)

	pbill := a.start(billing).streaming(t)
	pbill.waitLog(t, "this stream's checkpoint is under the key earlier versions used", 10*time.Second)
	a.insertTxIn("billing", "Invoice", 10, 2, &seqBill, false)
	a.waitConfirmed("billing", a.currentLSN(), 30*time.Second, pbill)

	b.insertTx("Shipment", 10, 2, &seqB, false)
	pb := b.start(nil)
	wantAll(t, exitMessage(t, pb), `checkpoint "postgres/walstream"`, "written from another Postgres cluster",
		"this stream (stream postgres/walstream", "Either two streams claim the key", "--stream")
	pb = b.start([]string{"--stream", "shipping"}).streaming(t)
	b.waitConfirmed("walstream", b.currentLSN(), 30*time.Second, pb)

	a.insertTx("Order", 10, 2, &seqA, false)
	a.waitConfirmed("walstream", a.currentLSN(), 30*time.Second, pa)
	if strings.Contains(pa.Log(), "session ended") {
		t.Errorf("stream postgres/walstream was disturbed by the other streams:\n%s", pa.Log())
	}
	a.checkExactlyOnce(a.readAll("Order"), "outbox.event.")
	a.checkExactlyOnceIn("billing", a.readAll("Invoice"), "outbox.event.")
	b.checkExactlyOnce(b.readAll("Shipment"), "outbox.event.")

	var keys []string
	for _, r := range a.kcat("walstream.checkpoints") {
		if !slices.Contains(keys, r.Key) {
			keys = append(keys, r.Key)
		}
	}
	slices.Sort(keys)
	if want := []string{"billing", "postgres/walstream", "shipping"}; !slices.Equal(keys, want) {
		t.Errorf("checkpoint keys %q, want %q (billing's stream keeps the old key)", keys, want)
	}
}
