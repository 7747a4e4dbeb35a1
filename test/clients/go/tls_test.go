package scenario

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/kxm-dev/kxm-hub/clients/go/kxmhub"
)

// The Go library over TLS (Options.TLS.CAFile) and mutual TLS (CertFile, KeyFile), against two
// hubs test/clients/go.test.ts starts for it:
//
//	KXM_TLS_HUB_URL      a hub with TLS (https://127.0.0.1:PORT)
//	KXM_MTLS_HUB_URL     a hub with mutual TLS (its client CA the same CA)
//	KXM_TLS_CA           the CA that signed the hubs' certificate (and the client certificate)
//	KXM_TLS_CLIENT_CERT, KXM_TLS_CLIENT_KEY   a client certificate that CA signed

type tlsEnv struct {
	tlsURL, mtlsURL string
	files           kxmhub.TLSFiles
	token           string
}

func loadTLSEnv(t *testing.T) tlsEnv {
	t.Helper()
	e := tlsEnv{
		tlsURL:  os.Getenv("KXM_TLS_HUB_URL"),
		mtlsURL: os.Getenv("KXM_MTLS_HUB_URL"),
		files:   kxmhub.TLSFiles{CAFile: os.Getenv("KXM_TLS_CA"), CertFile: os.Getenv("KXM_TLS_CLIENT_CERT"), KeyFile: os.Getenv("KXM_TLS_CLIENT_KEY")},
		token:   os.Getenv("KXM_PROJECT_TOKEN"),
	}
	if e.tlsURL == "" || e.mtlsURL == "" || e.files.CAFile == "" || e.files.CertFile == "" || e.files.KeyFile == "" {
		t.Fatal("KXM_TLS_HUB_URL, KXM_MTLS_HUB_URL, KXM_TLS_CA, KXM_TLS_CLIENT_CERT and KXM_TLS_CLIENT_KEY must be set; run through `npx vitest run test/clients/go.test.ts`")
	}
	return e
}

func connectTLS(t *testing.T, url, token string, files kxmhub.TLSFiles, opts ...connect.ClientOption) (*kxmhub.Session, error) {
	s, err := kxmhub.Connect(within(t), kxmhub.Options{
		URL: url, Token: token, Project: project, Name: "tls-" + randomHex(4), HeartbeatEvery: time.Hour, TLS: files, ClientOptions: opts,
	})
	if err == nil {
		t.Cleanup(func() { _ = s.Close(context.Background()) })
	}
	return s, err
}

func expectTLSCode(t *testing.T, err error, code, contains string) {
	t.Helper()
	if !errors.Is(err, &kxmhub.Error{Code: code}) || !strings.Contains(err.Error(), contains) {
		t.Fatalf("want %s containing %q, got %v", code, contains, err)
	}
	if kxmhub.AsError(err).Transient {
		t.Fatalf("%s must not be transient: %v", code, err)
	}
}

func TestLibraryOverTLSWithItsCAOverConnectAndGRPC(t *testing.T) {
	e := loadTLSEnv(t)
	ca := kxmhub.TLSFiles{CAFile: e.files.CAFile}
	for _, opts := range [][]connect.ClientOption{nil, {connect.WithGRPC()}} {
		s, err := connectTLS(t, e.tlsURL, e.token, ca, opts...)
		if err != nil {
			t.Fatalf("connect over TLS: %v", err)
		}
		lease, err := s.Acquire(within(t), "go/tls-"+randomHex(4), kxmhub.AcquireOptions{TTL: 10 * time.Second})
		if err != nil {
			t.Fatalf("acquire over TLS: %v", err)
		}
		if err := lease.Release(within(t)); err != nil {
			t.Fatalf("release over TLS: %v", err)
		}
	}
	_, err := connectTLS(t, e.tlsURL, e.token, kxmhub.TLSFiles{})
	expectTLSCode(t, err, "tls_failed", "certificate signed by unknown authority")
	missing := filepath.Join(t.TempDir(), "missing.pem")
	_, err = connectTLS(t, e.tlsURL, e.token, kxmhub.TLSFiles{CAFile: missing})
	expectTLSCode(t, err, "invalid_tls_config", "cannot read CAFile "+missing)
	// TLS files with an http:// URL would not be used: refused, nothing sent in clear.
	_, err = connectTLS(t, strings.Replace(e.tlsURL, "https://", "http://", 1), e.token, ca)
	expectTLSCode(t, err, "invalid_tls_config", "not https://")
}

func TestLibraryOverMutualTLSServedWithItsClientCertificateOnly(t *testing.T) {
	e := loadTLSEnv(t)
	s, err := connectTLS(t, e.mtlsURL, e.token, e.files, connect.WithGRPC())
	if err != nil {
		t.Fatalf("connect over mutual TLS: %v", err)
	}
	if _, err := s.Acquire(within(t), "go/mtls-"+randomHex(4), kxmhub.AcquireOptions{TTL: 10 * time.Second}); err != nil {
		t.Fatalf("acquire over mutual TLS: %v", err)
	}
	_, err = connectTLS(t, e.mtlsURL, e.token, kxmhub.TLSFiles{CAFile: e.files.CAFile})
	expectTLSCode(t, err, "tls_failed", "certificate required")
}
