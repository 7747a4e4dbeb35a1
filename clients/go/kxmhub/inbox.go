package kxmhub

import (
	"context"
	"iter"
	"strconv"

	"connectrpc.com/connect"

	hubv1 "github.com/kxm-dev/kxm-hub/gen/go/kxm/hub/v1"
)

// InboxEvent is one event of the agent's inbox stream: Kind "message" (to this agent), "reply"
// (to a message it sent), "cancelled" or "expired"; Cursor is its number in the stream.
type InboxEvent struct {
	Kind    string
	Message *hubv1.Message
	Cursor  int64
	s       *Session
}

// Ack acknowledges a message (it is delivered).
func (e InboxEvent) Ack(ctx context.Context) (*hubv1.Message, error) {
	res, err := e.s.Peer.AckMessage(ctx, connect.NewRequest(&hubv1.AckMessageRequest{MessageId: e.Message.GetId()}))
	if err != nil {
		return nil, AsError(err)
	}
	return res.Msg.GetMessage(), nil
}

// Reply replies to a message.
func (e InboxEvent) Reply(ctx context.Context, content string) (*hubv1.Message, error) {
	res, err := e.s.Peer.ReplyMessage(ctx, connect.NewRequest(&hubv1.ReplyMessageRequest{MessageId: e.Message.GetId(), Content: content}))
	if err != nil {
		return nil, AsError(err)
	}
	return res.Msg.GetMessage(), nil
}

// Inbox iterates the agent's inbox, resuming from the last cursor it yielded after a dropped
// connection or a hub restart (nothing lost, nothing twice) and where subscriber_too_slow says.
// It yields a non-nil error only for what retrying cannot fix (cursor_expired, a refused
// identity), then stops; it ends without an error when ctx is done. afterSeq nil: start with the
// messages not yet acknowledged.
func (s *Session) Inbox(ctx context.Context, afterSeq *int64) iter.Seq2[InboxEvent, error] {
	return func(yield func(InboxEvent, error) bool) {
		after := afterSeq
		var pause backoff
		for ctx.Err() == nil {
			stream, err := s.Peer.Subscribe(ctx, connect.NewRequest(&hubv1.SubscribeRequest{AfterSeq: after}))
			if err == nil {
				for stream.Receive() {
					pause.reset()
					f := stream.Msg()
					var kind string
					var m *hubv1.Message
					switch ev := f.GetEvent().(type) {
					case *hubv1.SubscribeResponse_Message:
						kind, m = "message", ev.Message
					case *hubv1.SubscribeResponse_Reply:
						kind, m = "reply", ev.Reply
					case *hubv1.SubscribeResponse_Cancelled:
						kind, m = "cancelled", ev.Cancelled
					case *hubv1.SubscribeResponse_Expired:
						kind, m = "expired", ev.Expired
					case *hubv1.SubscribeResponse_KeepAlive:
						// Where the stream stands: past what it skipped (what was no longer
						// pending when it opened), which a resume must not bring back.
						if cursor := f.GetCursor(); after == nil || cursor > *after {
							after = &cursor
						}
						continue
					default:
						continue
					}
					cursor := f.GetCursor()
					after = &cursor
					if !yield(InboxEvent{Kind: kind, Message: m, Cursor: cursor, s: s}, nil) {
						_ = stream.Close()
						return
					}
				}
				err = stream.Err()
				_ = stream.Close()
			}
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				e := AsError(err)
				if e.Code == "subscriber_too_slow" {
					if n, perr := strconv.ParseInt(e.Metadata["resumeAfterSeq"], 10, 64); perr == nil {
						after = &n
					}
					continue
				}
				if !reopens(e) {
					yield(InboxEvent{}, e)
					return
				}
			}
			// The stream ended or the hub is away: reconnect from the last cursor, with a back-off.
			if !pause.wait(ctx, s.clock) {
				return
			}
		}
	}
}
