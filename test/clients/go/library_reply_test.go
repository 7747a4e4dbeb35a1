package scenario

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/kxm-dev/kxm-hub/clients/go/kxmhub"
	hubv1 "github.com/kxm-dev/kxm-hub/gen/go/kxm/hub/v1"
)

// Session.AwaitReply: a sender gets the reply to its message whenever it came, without polling.

// getMessages counts the GetMessage calls that returned.
func getMessages(n *atomic.Int32) connect.Option {
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			res, err := next(ctx, req)
			if req.Spec().Procedure == "/kxm.hub.v1.PeerService/GetMessage" {
				n.Add(1)
			}
			return res, err
		}
	}))
}

// reply acks and replies to a message as its recipient.
func reply(t *testing.T, recipient *kxmhub.Session, id, content string) {
	t.Helper()
	if _, err := recipient.Peer.AckMessage(within(t), connect.NewRequest(&hubv1.AckMessageRequest{MessageId: id})); err != nil {
		t.Fatal(err)
	}
	if _, err := recipient.Peer.ReplyMessage(within(t), connect.NewRequest(&hubv1.ReplyMessageRequest{MessageId: id, Content: content})); err != nil {
		t.Fatal(err)
	}
}

type awaited struct {
	m   *hubv1.Message
	err error
}

// awaiting is an AwaitReply running in its own goroutine.
type awaiting chan awaited

func awaitReply(s *kxmhub.Session, id string) awaiting {
	done := make(awaiting, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
		defer cancel()
		m, err := s.AwaitReply(ctx, id)
		done <- awaited{m, err}
	}()
	return done
}

func (a awaiting) get(t *testing.T) awaited {
	t.Helper()
	select {
	case r := <-a:
		return r
	case <-time.After(waitTimeout):
		t.Fatal("AwaitReply did not return")
		return awaited{}
	}
}

func expectReply(t *testing.T, r awaited, id, content string) {
	t.Helper()
	if r.err != nil || r.m.GetId() != id || r.m.GetReply().GetContent() != content ||
		r.m.GetStatus() != hubv1.MessageStatus_MESSAGE_STATUS_REPLIED {
		t.Fatalf("AwaitReply: %v %v, want message %s replied %q", r.m, r.err, id, content)
	}
}

func TestLibraryAwaitReplyReturnsAReplyMadeBeforeTheCall(t *testing.T) {
	e := loadEnv(t)
	clock := newTestClock(e.controlURL)
	var gets atomic.Int32
	sender := open(t, e, clock, "sender", getMessages(&gets))
	recipient := open(t, e, clock, "recipient")
	sent, err := sender.Send(within(t), recipient.Agent.GetId(), "review this")
	if err != nil {
		t.Fatal(err)
	}
	reply(t, recipient, sent.GetId(), "looks good")
	// The reply came before the sender had any stream open: it is read from the message.
	expectReply(t, awaitReply(sender, sent.GetId()).get(t), sent.GetId(), "looks good")
	if n := gets.Load(); n != 1 {
		t.Fatalf("GetMessage calls: %d, want 1", n)
	}
}

func TestLibraryAwaitReplyReturnsAReplyMadeDuringTheWait(t *testing.T) {
	e := loadEnv(t)
	clock := newTestClock(e.controlURL)
	var gets atomic.Int32
	sender := open(t, e, clock, "sender", getMessages(&gets))
	recipient := open(t, e, clock, "recipient")
	sent, err := sender.Send(within(t), recipient.Agent.GetId(), "review this")
	if err != nil {
		t.Fatal(err)
	}
	wait := awaitReply(sender, sent.GetId())
	// The stream is live and the message was read (not replied yet): the reply comes as an event.
	eventually(t, "the message read", func() bool { return gets.Load() == 1 })
	reply(t, recipient, sent.GetId(), "looks good")
	expectReply(t, wait.get(t), sent.GetId(), "looks good")
	if n := gets.Load(); n != 1 {
		t.Fatalf("GetMessage calls: %d, want 1 (no polling)", n)
	}
}

// dropFirstStream drops the first stream it sees after its ready frame, once drop is closed,
// as a connection that breaks would.
type dropFirstStream struct {
	drop    chan struct{}
	streams atomic.Int32
}

type droppedConn struct {
	connect.StreamingClientConn
	ctx    context.Context
	drop   chan struct{}
	frames int
}

func (c *droppedConn) Receive(m any) error {
	if c.frames++; c.frames == 1 {
		return c.StreamingClientConn.Receive(m) // the ready frame
	}
	select {
	case <-c.drop:
		return connect.NewError(connect.CodeUnavailable, errors.New("the connection dropped"))
	case <-c.ctx.Done():
		return connect.NewError(connect.CodeCanceled, c.ctx.Err())
	}
}

func (d *dropFirstStream) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }
func (d *dropFirstStream) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
func (d *dropFirstStream) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if d.streams.Add(1) == 1 {
			return &droppedConn{StreamingClientConn: conn, ctx: ctx, drop: d.drop}
		}
		return conn
	}
}

func TestLibraryAwaitReplyReconnectsAndReadsAReplyMadeWhileItsStreamWasDown(t *testing.T) {
	e := loadEnv(t)
	clock := newTestClock(e.controlURL)
	var gets atomic.Int32
	dropper := &dropFirstStream{drop: make(chan struct{})}
	sender := open(t, e, clock, "sender", getMessages(&gets), connect.WithInterceptors(dropper))
	recipient := open(t, e, clock, "recipient")
	sent, err := sender.Send(within(t), recipient.Agent.GetId(), "review this")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the heartbeats asleep", func() bool { return clock.sleepers() >= 2 })
	wait := awaitReply(sender, sent.GetId())
	eventually(t, "the message read", func() bool { return gets.Load() == 1 })
	close(dropper.drop)
	// The reply comes while the stream is down: no event will carry it, the next read will.
	eventually(t, "the back-off asleep", func() bool { return clock.sleepers() >= 3 })
	reply(t, recipient, sent.GetId(), "looks good")
	clock.advance(t, 100*time.Millisecond)
	expectReply(t, wait.get(t), sent.GetId(), "looks good")
	if n, m := gets.Load(), dropper.streams.Load(); n != 2 || m != 2 {
		t.Fatalf("GetMessage calls %d, streams %d: want 2 and 2", n, m)
	}
}

func TestLibraryAwaitReplySaysWhenTheMessageEndedWithoutAReply(t *testing.T) {
	e := loadEnv(t)
	clock := newTestClock(e.controlURL)
	var gets atomic.Int32
	sender := open(t, e, clock, "sender", getMessages(&gets))
	recipient := open(t, e, clock, "recipient")
	ended := func(r awaited, status string) {
		t.Helper()
		var herr *kxmhub.Error
		if !errors.As(r.err, &herr) || herr.Code != "message_ended" || herr.Metadata["status"] != status || r.m != nil {
			t.Fatalf("AwaitReply: %v %v, want message_ended %s", r.m, r.err, status)
		}
	}

	// Cancelled before the call.
	cancelled, err := sender.Send(within(t), recipient.Agent.GetId(), "never mind")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sender.Peer.CancelMessage(within(t), connect.NewRequest(&hubv1.CancelMessageRequest{MessageId: cancelled.GetId()})); err != nil {
		t.Fatal(err)
	}
	ended(awaitReply(sender, cancelled.GetId()).get(t), "cancelled")

	// Expired during the wait.
	res, err := sender.Peer.SendMessage(within(t), connect.NewRequest(&hubv1.SendMessageRequest{Target: recipient.Agent.GetId(), Content: "quick", TtlMs: proto.Int32(1000)}))
	if err != nil {
		t.Fatal(err)
	}
	before := gets.Load()
	wait := awaitReply(sender, res.Msg.GetMessage().GetId())
	eventually(t, "the message read", func() bool { return gets.Load() == before+1 })
	clock.advance(t, 1001*time.Millisecond)
	post(t, e.controlURL+"/sweep")
	ended(wait.get(t), "expired")
	if n := gets.Load(); n != before+1 {
		t.Fatalf("GetMessage calls: %d, want %d (the expiry came as an event)", n, before+1)
	}

	// Not the sender's to wait for.
	_, err = recipient.AwaitReply(within(t), cancelled.GetId())
	if !errors.Is(err, &kxmhub.Error{Code: "message_forbidden"}) {
		t.Fatalf("the recipient's AwaitReply: %v", err)
	}

	// Its context ends the wait.
	pending, err := sender.Send(within(t), recipient.Agent.GetId(), "no answer")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := sender.AwaitReply(ctx, pending.GetId()); !errors.Is(err, context.Canceled) || !errors.Is(err, &kxmhub.Error{Code: "cancelled"}) {
		t.Fatalf("AwaitReply with its context done: %v", err)
	}
}
