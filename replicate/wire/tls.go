package wire

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// TLSFiles names the PEM files for mutual TLS between a primary and its
// backups: this node's certificate and key, and the CA that signs the
// other side's certificate. All empty means no TLS (the token alone).
type TLSFiles struct {
	Cert, Key, CA string
}

// Enabled reports whether TLS is configured.
func (f TLSFiles) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

func (f TLSFiles) load() (tls.Certificate, *x509.CertPool, error) {
	if f.Cert == "" || f.Key == "" || f.CA == "" {
		var missing []string
		for _, m := range []struct{ v, name string }{{f.Cert, "certificate"}, {f.Key, "key"}, {f.CA, "CA"}} {
			if m.v == "" {
				missing = append(missing, m.name)
			}
		}
		verb := "is"
		if len(missing) > 1 {
			verb = "are"
		}
		return tls.Certificate{}, nil, fmt.Errorf("mutual TLS needs a certificate, a key and a CA (--tls-cert, --tls-key, --tls-ca); the %s %s missing", strings.Join(missing, " and "), verb)
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("load TLS key pair: %w", err)
	}
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("read TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return tls.Certificate{}, nil, fmt.Errorf("TLS CA %s holds no certificate", f.CA)
	}
	return cert, pool, nil
}

// ServerConfig is the TLS configuration of a server that requires and
// verifies its clients' certificates against the CA (the replication
// channel's, and the admin listener's).
func (f TLSFiles) ServerConfig() (*tls.Config, error) {
	cert, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}, nil
}

// clientConfig presents our certificate and verifies the backup's against
// the CA, for the host in addr.
func (f TLSFiles) clientConfig(addr string) (*tls.Config, error) {
	cert, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool,
		ServerName: host, MinVersion: tls.VersionTLS13}, nil
}

// Check loads the files, so a mistake is refused before anything starts.
func (f TLSFiles) Check() error {
	if !f.Enabled() {
		return nil
	}
	_, _, err := f.load()
	return err
}

// DialGRPC opens a client connection to the backup at addr with the
// replication channel's credentials: mutual TLS when configured, and the
// token on every call.
func DialGRPC(addr, token string, tlsFiles TLSFiles, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if tlsFiles.Enabled() {
		cfg, err := tlsFiles.clientConfig(addr)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(cfg)
	}
	opts = append(opts, grpc.WithTransportCredentials(creds),
		grpc.WithPerRPCCredentials(tokenCreds{token: token, secure: tlsFiles.Enabled()}))
	return grpc.NewClient(addr, opts...)
}

// NewDialer opens raw streams (stream.go) to the backup at addr with the
// same credentials as DialGRPC. A stream it opens fails after silence
// without a word from the backup (Silence, unless a test wants sooner).
func NewDialer(addr, token string, tlsFiles TLSFiles, silence time.Duration) (Dialer, error) {
	d := Dialer{addr: addr, token: token, silence: silence}
	if tlsFiles.Enabled() {
		cfg, err := tlsFiles.clientConfig(addr)
		if err != nil {
			return d, err
		}
		d.tls = cfg
	}
	return d, nil
}
