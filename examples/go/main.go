// The typical agent program on the Go library: a builder holds repo/main (10 s TTL, renewed for
// it) through its work, checks the fence and commits; a reviewer reads its inbox, acks, replies;
// the builder reads the reply.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/kxm-dev/kxm-hub/clients/go/kxmhub"
)

func main() {
	// WORK: how long the work takes, e.g. 25s.
	ctx, msgID, hub := context.Background(), "", kxmhub.Options{URL: os.Getenv("KXM_URL"), Token: os.Getenv("KXM_TOKEN"), Project: "demo"}
	reviewer, builder := must(kxmhub.Connect(ctx, hub.Named("reviewer"))), must(kxmhub.Connect(ctx, hub.Named("builder")))
	defer func() { must(0, errors.Join(builder.Close(ctx), reviewer.Close(ctx))) }()
	must(0, builder.WithLease(ctx, "repo/main", kxmhub.AcquireOptions{TTL: 10 * time.Second, Wait: 30 * time.Second}, func(ctx context.Context, token int64) error {
		time.Sleep(must(time.ParseDuration(os.Getenv("WORK"))))
		must(0, context.Cause(ctx)) // the lease was lost: stop before the irreversible step
		fmt.Println("commit to main with fencing token", token)
		msgID = must(builder.Send(ctx, "reviewer", fmt.Sprint("pushed main at token ", token))).GetId()
		return nil
	}))
	for ev, err := range reviewer.Inbox(ctx, nil) {
		must(0, err)
		must(ev.Ack(ctx))
		must(ev.Reply(ctx, "reviewed: "+ev.Message.GetContent()))
		fmt.Printf("reviewer replied to %q\n", ev.Message.GetContent())
		break
	}
	fmt.Printf("builder read the reply %q\n", must(builder.AwaitReply(ctx, msgID)).GetReply().GetContent())
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
