package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/walstream/walstream/internal/testenv"
)

// awsEnv gives walstream static AWS credentials through the environment,
// the first link of the SDK's default chain, and nothing else to find.
func awsEnv(keys aws.Credentials) []string {
	return []string{"AWS_ACCESS_KEY_ID=" + keys.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + keys.SecretAccessKey,
		"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/nonexistent", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent", "AWS_PROFILE=", "AWS_REGION="}
}

// TestRDSIAMAuth: with --pg-aws-iam-auth walstream streams through a
// stand-in that checks IAM tokens as RDS does, every connection (the
// regular ones and the replication one, again after the walsender is
// terminated) with a token of its own, every row once; with a wrong region
// it stops with an error naming the region, the endpoint and the signing
// time, never the token.
func TestRDSIAMAuth(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	ca := testenv.NewCA(t, "rds-ca-rsa2048-g1")
	keys := aws.Credentials{AccessKeyID: "AKIDWALSTREAME2E", SecretAccessKey: "rds-e2e-Sekr1t-key"}
	registerSecret(keys.SecretAccessKey)
	proxy := testenv.StartRDSProxy(t, e.pg, ca, "eu-west-1", keys)
	args := func(region string) []string {
		return []string{"--pg-url", fmt.Sprintf("postgres://postgres@%s:%d/postgres?sslmode=verify-full&sslrootcert=%s", proxy.Host, proxy.Port, ca.CertFile),
			"--pg-aws-iam-auth", "--pg-aws-region", region}
	}
	p := e.start(args("eu-west-1"), awsEnv(keys)...).streaming(t)
	seq := 0
	e.delivered(p, "Order", 40, 4, &seq)
	first := proxy.Accepted()
	e.pg.Exec("postgres", "SELECT pg_terminate_backend(pid) FROM pg_stat_replication")
	e.insertTx("Order", 40, 4, &seq, false)
	e.waitConfirmed("walstream", e.currentLSN(), 60*time.Second, p)
	p.stop()
	e.checkExactlyOnce(e.readAll("Order"), "outbox.event.")
	if n := proxy.Accepted(); first < 2 || n <= first {
		t.Errorf("%d connections authenticated with tokens before the walsender was terminated, %d in all: want at least 2, then more", first, n)
	}
	if r := proxy.Refusals(); len(r) > 0 {
		t.Errorf("tokens refused while streaming: %q", r)
	}
	for _, s := range []string{"X-Amz-Signature", "X-Amz-Credential"} {
		if strings.Contains(p.Log(), s) {
			t.Errorf("walstream's log holds a token (%s)", s)
		}
	}

	p = e.start(args("us-east-1"), awsEnv(keys)...)
	msg := exitMessage(t, p)
	wantAll(t, msg, `PAM authentication failed for user "postgres"`, fmt.Sprintf("IAM token for user postgres at %s:%d", proxy.Host, proxy.Port),
		"signed for region us-east-1 at ", "by this machine's clock")
	if strings.Contains(msg, "X-Amz-Signature") {
		t.Errorf("the error holds the token: %s", msg)
	}
	t.Logf("with the wrong region: %s", msg)
}
