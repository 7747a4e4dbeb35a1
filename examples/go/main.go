// The typical agent program on the Go library: a builder holds repo/main (10 s TTL, renewed for
// it) through its work, checks the fence and commits; a reviewer reads its inbox, acks, replies.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/kxm-dev/kxm-hub/gen/go/kxmhub"
)

func main() {
	ctx, work := context.Background(), os.Getenv("WORK") // how long the work takes, e.g. 25s
	hub := kxmhub.Options{URL: os.Getenv("KXM_URL"), Token: os.Getenv("KXM_TOKEN"), Project: "demo"}
	reviewer, builder := must(kxmhub.Connect(ctx, named(hub, "reviewer"))), must(kxmhub.Connect(ctx, named(hub, "builder")))
	defer reviewer.Close(ctx)
	defer builder.Close(ctx)
	must(0, builder.WithLease(ctx, "repo/main", kxmhub.AcquireOptions{TTL: 10 * time.Second, Wait: 30 * time.Second}, func(ctx context.Context, token int64) error {
		time.Sleep(must(time.ParseDuration(work)))
		if err := context.Cause(ctx); err != nil {
			return err // the lease was lost: stop before the irreversible step
		}
		fmt.Println("commit to main with fencing token", token)
		_, err := builder.Send(ctx, "reviewer", fmt.Sprint("pushed main at token ", token))
		return err
	}))
	for ev, err := range reviewer.Inbox(ctx, nil) {
		must(ev.Ack(ctx))
		must(ev.Reply(ctx, "reviewed: "+must(ev.Message, err).GetContent()))
		fmt.Printf("reviewer replied to %q\n", ev.Message.GetContent())
		break
	}
}

func named(o kxmhub.Options, name string) kxmhub.Options { o.Name = name; return o }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
