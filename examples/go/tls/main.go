// An agent of a hub with TLS and mutual TLS: it trusts the CA that signed the hub's certificate
// and presents this host's client certificate (one the hub's KXM_TLS_CLIENT_CA signed).
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/kxm-dev/kxm-hub/clients/go/kxmhub"
)

func main() {
	ctx := context.Background()
	hub, err := kxmhub.Connect(ctx, kxmhub.Options{
		URL: os.Getenv("KXM_URL"), Token: os.Getenv("KXM_TOKEN"), Project: "demo", Name: "deployer",
		TLS: kxmhub.TLSFiles{CAFile: os.Getenv("KXM_TLS_CA"), CertFile: os.Getenv("KXM_TLS_CLIENT_CERT"), KeyFile: os.Getenv("KXM_TLS_CLIENT_KEY")},
	})
	if err != nil {
		log.Fatal(err) // tls_failed: ... when the handshake fails, with the reason
	}
	err = hub.WithLease(ctx, "deploy/prod", kxmhub.AcquireOptions{TTL: 10 * time.Second}, func(ctx context.Context, token int64) error {
		fmt.Println("deploying with fencing token", token)
		return nil
	})
	if err = errors.Join(err, hub.Close(ctx)); err != nil {
		log.Fatal(err)
	}
}
