package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/walstream/walstream/publish"
)

// envKafkaSASLPassword is the SASL password's environment variable. It has
// no flag: a secret on the command line shows in ps and shell history.
const envKafkaSASLPassword = envPrefix + "KAFKA_SASL_PASSWORD"

// readSecret reads a secret file, dropping one trailing newline.
func readSecret(flagName, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--%s: %w", flagName, err)
	}
	return strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"), nil
}

// pgConfig parses --pg-url and applies --pg-password-file. libpq's
// settings work as usual: sslmode (verify-full in production), sslrootcert,
// sslcert, sslkey, passfile and ~/.pgpass.
func (c *Config) pgConfig() (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(c.PGURL)
	if err != nil {
		return nil, fmt.Errorf("--pg-url: %w", err)
	}
	if c.PGPasswordFile != "" {
		if cfg.Password, err = readSecret("pg-password-file", c.PGPasswordFile); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// kafkaConn builds the Kafka connection settings, reading the TLS files and
// the SASL password.
func (c *Config) kafkaConn() (publish.KafkaSettings, error) {
	conn := publish.KafkaSettings{Brokers: c.brokers(), SASLMechanism: c.KafkaSASLMechanism, SASLUser: c.KafkaSASLUser}
	if c.KafkaTLS || c.KafkaTLSCAFile != "" || c.KafkaTLSCertFile != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.KafkaTLSServerName}
		if c.KafkaTLSCAFile != "" {
			pem, err := os.ReadFile(c.KafkaTLSCAFile)
			if err != nil {
				return conn, fmt.Errorf("--kafka-tls-ca-file: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return conn, fmt.Errorf("--kafka-tls-ca-file %s: no PEM certificate in it", c.KafkaTLSCAFile)
			}
		}
		if (c.KafkaTLSCertFile == "") != (c.KafkaTLSKeyFile == "") {
			return conn, errors.New("--kafka-tls-cert-file and --kafka-tls-key-file go together")
		}
		if c.KafkaTLSCertFile != "" {
			cert, err := tls.LoadX509KeyPair(c.KafkaTLSCertFile, c.KafkaTLSKeyFile)
			if err != nil {
				return conn, fmt.Errorf("--kafka-tls-cert-file/--kafka-tls-key-file: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		conn.TLS = tc
	}
	if c.KafkaSASLPasswordFile != "" {
		pw, err := readSecret("kafka-sasl-password-file", c.KafkaSASLPasswordFile)
		if err != nil {
			return conn, err
		}
		conn.SASLPassword = pw
	} else {
		conn.SASLPassword = os.Getenv(envKafkaSASLPassword)
	}
	if err := conn.CheckSASL(); err != nil {
		return conn, fmt.Errorf("--kafka-sasl-mechanism: %w (the password comes from --kafka-sasl-password-file or $%s)", err, envKafkaSASLPassword)
	}
	return conn, nil
}
