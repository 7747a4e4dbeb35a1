package kxmhub

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"time"
)

// TLSFiles is TLS toward an https:// hub: the CA to trust and, for a hub with mutual TLS
// (KXM_TLS_CLIENT_CA), the client certificate and key to present. All PEM files; an empty CAFile
// trusts the system's CAs.
type TLSFiles struct {
	CAFile   string // the CA that signed the hub's certificate, trusted instead of the system's
	CertFile string // the client certificate, signed by the hub's client CA; needs KeyFile
	KeyFile  string // its private key, unencrypted
}

// IsZero reports whether no file is set.
func (t TLSFiles) IsZero() bool { return t == TLSFiles{} }

// Config reads the files into a tls.Config: RootCAs from CAFile, Certificates from CertFile and
// KeyFile. An unreadable file, a file without a certificate, a certificate without its key (or
// the reverse) is an *Error with Code "invalid_tls_config" naming the file.
func (t TLSFiles) Config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, tlsConfigError("cannot read CAFile %s: %v", t.CAFile, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, tlsConfigError("CAFile %s holds no PEM certificate", t.CAFile)
		}
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, tlsConfigError("CertFile and KeyFile go together (CertFile %q, KeyFile %q)", t.CertFile, t.KeyFile)
	}
	if t.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, tlsConfigError("cannot use CertFile %s with KeyFile %s: %v", t.CertFile, t.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// NewHTTPClient is an HTTP client for an https:// hub with these files: HTTP/2 when the hub offers
// it by ALPN (it does; gRPC needs it), else HTTP/1.1. Connect uses one when Options.TLS is set
// and Options.HTTPClient is not.
func NewHTTPClient(t TLSFiles) (*http.Client, error) {
	cfg, err := t.Config()
	if err != nil {
		return nil, err
	}
	return httpClientWith(cfg), nil
}

func httpClientWith(cfg *tls.Config) *http.Client {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSClientConfig:     cfg,
		Protocols:           &protocols,
		MaxIdleConnsPerHost: 4,
	}}
}

func tlsConfigError(format string, args ...any) *Error {
	return &Error{Code: "invalid_tls_config", Message: fmt.Sprintf(format, args...), Metadata: map[string]string{}}
}

// isTLSFailure reports whether err's chain holds a failed TLS handshake: a hub certificate the
// client does not trust, a TLS alert from the hub (a client certificate required or refused), a
// port that does not speak TLS.
func isTLSFailure(err error) bool {
	var verify *tls.CertificateVerificationError
	var unknownAuthority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var record tls.RecordHeaderError
	var alert tls.AlertError
	var op *net.OpError
	switch {
	case errors.As(err, &verify), errors.As(err, &unknownAuthority), errors.As(err, &hostname), errors.As(err, &invalid):
	case errors.As(err, &record), errors.As(err, &alert):
	case errors.As(err, &op) && op.Op == "remote error":
		// crypto/tls reports an alert from the peer as a net.OpError "remote error".
	default:
		return false
	}
	return true
}

// errClosedAfterHandshake is what a hub with mutual TLS does to a client certificate its client
// CA did not sign: it closes the connection once the handshake is done, without an alert.
var errClosedAfterHandshake = errors.New("the hub closed the connection right after the TLS handshake: a hub with mutual TLS does so when its client CA did not sign the client certificate")

// handshakeFailure dials an https:// hub once with cfg (nil: the system's CAs) and reads its first
// bytes: the TLS failure, if any. Connect asks it when its first call failed without a reason
// one can act on: with TLS 1.3 the hub judges the client certificate after the client's side of
// the handshake is done, and its alert may reach the HTTP/2 transport only as a connection that
// "could not be established".
func handshakeFailure(ctx context.Context, rawURL string, cfg *tls.Config) error {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "https" {
		return nil
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "443")
	}
	c := &tls.Config{}
	if cfg != nil {
		c = cfg.Clone()
	}
	// h2 first: a hub that took the handshake speaks at once (its SETTINGS), so the read returns.
	c.NextProtos = []string{"h2", "http/1.1"}
	conn, err := (&tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: c}).DialContext(ctx, "tcp", addr)
	if err != nil {
		if isTLSFailure(err) {
			return err
		}
		return nil
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	switch {
	case err == nil:
		return nil
	case isTLSFailure(err):
		return err
	case len(c.Certificates) > 0 && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
		return errClosedAfterHandshake
	}
	return nil
}
