package testenv

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/jackc/pgx/v5/pgproto3"
)

// RDSProxy stands in for an Amazon RDS endpoint with IAM database
// authentication in front of a Postgres of the harness: it speaks TLS only,
// asks the client for a cleartext password, and takes it as RDS takes an
// IAM token, a SigV4 presigned URL (service rds-db, Action=connect) that
// must be signed with Credentials for its host, port, user and Region,
// within 15 minutes by its own clock. It refuses any other with RDS's
// "PAM authentication failed for user" and records why (Refusals); it
// passes an accepted connection, its startup parameters (replication=
// database included) unchanged, to the Postgres behind it, which trusts
// loopback.
type RDSProxy struct {
	Host        string // 127.0.0.1
	Port        int
	Region      string
	Credentials aws.Credentials
	backend     string
	tls         *tls.Config
	t           testing.TB

	mu       sync.Mutex
	skew     time.Duration // its clock ahead of the machine's
	refusals []string
	accepted int
}

// rdsTokenLife is how long after its signing time RDS takes a token.
const rdsTokenLife = 15 * time.Minute

// StartRDSProxy serves on loopback, with a certificate ca issues for
// 127.0.0.1 and localhost, in front of pg, until the test ends.
func StartRDSProxy(t testing.TB, pg *Postgres, ca *CA, region string, creds aws.Credentials) *RDSProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &RDSProxy{Host: "127.0.0.1", Port: l.Addr().(*net.TCPAddr).Port, Region: region, Credentials: creds,
		backend: net.JoinHostPort("127.0.0.1", strconv.Itoa(pg.Port)), tls: ca.ServerTLS(t, "127.0.0.1", "localhost"), t: t}
	var wg sync.WaitGroup
	open := map[net.Conn]bool{}
	t.Cleanup(func() {
		l.Close()
		p.mu.Lock()
		for c := range open {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			open[c] = true
			p.mu.Unlock()
			wg.Go(func() {
				p.serve(c)
				p.mu.Lock()
				delete(open, c)
				p.mu.Unlock()
			})
		}
	})
	return p
}

// SetSkew puts the stand-in's clock d ahead of the machine's (behind for
// a negative d), as a database whose clock and the client's disagree.
func (p *RDSProxy) SetSkew(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.skew = d
}

// Refusals are the reasons of the tokens refused so far.
func (p *RDSProxy) Refusals() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.refusals...)
}

// Accepted is the number of connections authenticated so far.
func (p *RDSProxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

func (p *RDSProxy) serve(raw net.Conn) {
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(30 * time.Second))
	be := pgproto3.NewBackend(raw, raw)
	msg, err := be.ReceiveStartupMessage()
	if err != nil {
		return
	}
	if _, ok := msg.(*pgproto3.GSSEncRequest); ok {
		raw.Write([]byte{'N'})
		if msg, err = be.ReceiveStartupMessage(); err != nil {
			return
		}
	}
	if _, ok := msg.(*pgproto3.SSLRequest); !ok {
		p.fatal(be, "28000", "no pg_hba.conf entry: this endpoint takes TLS connections only")
		return
	}
	raw.Write([]byte{'S'})
	conn := tls.Server(raw, p.tls)
	if err := conn.Handshake(); err != nil {
		return
	}
	be = pgproto3.NewBackend(conn, conn)
	msg, err = be.ReceiveStartupMessage()
	if err != nil {
		return
	}
	startup, ok := msg.(*pgproto3.StartupMessage)
	if !ok {
		return
	}
	user := startup.Parameters["user"]
	be.Send(&pgproto3.AuthenticationCleartextPassword{})
	if be.Flush() != nil {
		return
	}
	if err := be.SetAuthType(pgproto3.AuthTypeCleartextPassword); err != nil {
		return
	}
	m, err := be.Receive()
	if err != nil {
		return
	}
	pw, ok := m.(*pgproto3.PasswordMessage)
	if !ok {
		return
	}
	p.mu.Lock()
	now := time.Now().Add(p.skew)
	p.mu.Unlock()
	if why := p.verify(pw.Password, user, now); why != "" {
		p.mu.Lock()
		p.refusals = append(p.refusals, why)
		p.mu.Unlock()
		p.t.Logf("RDS stand-in: refused user %s: %s", user, why)
		p.fatal(be, "28000", fmt.Sprintf("PAM authentication failed for user %q", user))
		return
	}
	back, err := net.DialTimeout("tcp", p.backend, 10*time.Second)
	if err != nil {
		p.fatal(be, "08006", err.Error())
		return
	}
	defer back.Close()
	buf, err := startup.Encode(nil)
	if err != nil {
		return
	}
	if _, err := back.Write(buf); err != nil {
		return
	}
	p.mu.Lock()
	p.accepted++
	p.mu.Unlock()
	raw.SetDeadline(time.Time{})
	done := make(chan struct{}, 2)
	go func() { io.Copy(back, conn); done <- struct{}{} }()
	go func() { io.Copy(conn, back); done <- struct{}{} }()
	<-done // either side's end ends both
	raw.Close()
	back.Close()
	<-done
}

func (p *RDSProxy) fatal(be *pgproto3.Backend, code, msg string) {
	be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: code, Message: msg})
	be.Flush()
}

// verify checks token as RDS checks an IAM token at time now: its form,
// its host, port, user and expiry, and its signature recomputed with the
// stand-in's credentials and region. It returns why it refuses, or "".
func (p *RDSProxy) verify(token, user string, now time.Time) string {
	u, err := url.Parse("https://" + token)
	if err != nil {
		return "not a presigned URL"
	}
	q := u.Query()
	endpoint := net.JoinHostPort(p.Host, strconv.Itoa(p.Port))
	switch {
	case q.Get("Action") != "connect":
		return fmt.Sprintf("action %q, want connect", q.Get("Action"))
	case u.Host != endpoint && u.Host != net.JoinHostPort("localhost", strconv.Itoa(p.Port)):
		return fmt.Sprintf("signed for endpoint %s, want %s", u.Host, endpoint)
	case q.Get("DBUser") != user:
		return fmt.Sprintf("signed for user %q, connecting as %q", q.Get("DBUser"), user)
	case q.Get("X-Amz-Expires") != "900":
		return fmt.Sprintf("X-Amz-Expires %q, want 900", q.Get("X-Amz-Expires"))
	}
	signed, err := time.Parse("20060102T150405Z", q.Get("X-Amz-Date"))
	if err != nil {
		return fmt.Sprintf("X-Amz-Date %q: %v", q.Get("X-Amz-Date"), err)
	}
	if now.After(signed.Add(rdsTokenLife)) {
		return fmt.Sprintf("expired: signed at %s, %s before this endpoint's clock", signed.Format(time.RFC3339), now.Sub(signed).Round(time.Second))
	}
	if signed.After(now.Add(5 * time.Minute)) {
		return fmt.Sprintf("signed at %s, in the future of this endpoint's clock", signed.Format(time.RFC3339))
	}
	// The token as the SDK builds it: the query before signing, then
	// presigned at the token's own time with what RDS expects.
	values := url.Values{}
	values.Set("Action", "connect")
	values.Set("DBUser", user)
	values.Set("X-Amz-Expires", "900")
	req, err := http.NewRequest("GET", "https://"+u.Host+"/?"+values.Encode(), nil)
	if err != nil {
		return err.Error()
	}
	const emptyPayload = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	want, _, err := v4.NewSigner().PresignHTTP(context.Background(), p.Credentials, req, emptyPayload, "rds-db", p.Region, signed)
	if err != nil {
		return err.Error()
	}
	wu, err := url.Parse(want)
	if err != nil {
		return err.Error()
	}
	if got, want := q.Get("X-Amz-Credential"), wu.Query().Get("X-Amz-Credential"); got != want {
		return fmt.Sprintf("credential scope %s, want %s", got, want)
	}
	if q.Get("X-Amz-Signature") != wu.Query().Get("X-Amz-Signature") {
		return "signature does not match"
	}
	return ""
}
