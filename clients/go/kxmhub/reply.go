package kxmhub

import (
	"context"
	"strings"

	"connectrpc.com/connect"

	hubv1 "github.com/kxm-dev/kxm-hub/gen/go/kxm/hub/v1"
)

// AwaitReply waits for the reply to a message this agent sent (Send's message id) and returns
// the message with its Reply set, whether the reply came before the call or comes during it.
//
// It does not poll: it opens the agent's Subscribe stream and, once the stream is live (its ready
// frame), reads the message once; a reply made before that is in the message, one made after it
// arrives on the stream as a reply event. A stream the connection under it dropped, the hub
// being away or subscriber_too_slow reopen it with a back-off, reading the message again each
// time. Other Subscribe streams of the agent (Inbox) are not disturbed.
//
// Errors: message_ended (Metadata "status": "cancelled", "expired" or "error") when the message
// ended without a reply, before or during the wait; message_forbidden when this agent is not
// its sender; the hub's refusals (message_not_found, invalid_agent_identity after a takeover);
// cancelled, unwrapping to context.Cause(ctx), when ctx ends first. The hub tells the sender of
// an expiry as it happens, but not of its own cancel: a message cancelled during the wait is
// noticed only when the stream is reopened, so whoever cancels it should end ctx as well.
func (s *Session) AwaitReply(ctx context.Context, messageID string) (*hubv1.Message, error) {
	var pause backoff
	for {
		m, err := s.awaitReplyOnce(ctx, messageID, &pause)
		switch {
		case m != nil:
			return m, nil
		case ctx.Err() != nil:
			return nil, ended(ctx)
		case !reopens(err):
			return nil, err
		case err != nil && err.Code == "subscriber_too_slow":
			continue
		}
		if !pause.wait(ctx, s.clock) {
			return nil, ended(ctx)
		}
	}
}

// awaitReplyOnce is AwaitReply over one Subscribe stream: the replied message, or why the stream
// ended (nil: it ended cleanly).
func (s *Session) awaitReplyOnce(ctx context.Context, id string, pause *backoff) (*hubv1.Message, *Error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The default start: live events once the ready frame is sent (replies are live-only events;
	// the pending messages replayed to this agent are skipped).
	stream, err := s.Peer.Subscribe(ctx, connect.NewRequest(&hubv1.SubscribeRequest{}))
	if err != nil {
		return nil, AsError(err)
	}
	defer func() {
		cancel() // the stream is abandoned mid-way: end it rather than read it to its end
		_ = stream.Close()
	}()
	for stream.Receive() {
		pause.reset()
		switch ev := stream.Msg().GetEvent().(type) {
		case *hubv1.SubscribeResponse_Ready:
			// From here on a reply arrives on this stream; one made before is in the message.
			res, err := s.Peer.GetMessage(ctx, connect.NewRequest(&hubv1.GetMessageRequest{MessageId: id}))
			if err != nil {
				return nil, AsError(err)
			}
			if m, err := s.replied(res.Msg.GetMessage()); m != nil || err != nil {
				return m, err
			}
		case *hubv1.SubscribeResponse_Reply:
			if ev.Reply.GetId() == id {
				return ev.Reply, nil
			}
		case *hubv1.SubscribeResponse_Expired:
			if ev.Expired.GetId() == id {
				return nil, messageEnded(ev.Expired, hubv1.MessageStatus_MESSAGE_STATUS_EXPIRED)
			}
		}
	}
	return nil, AsError(stream.Err())
}

// replied is the message when it has its reply, an error when it ended without one or is not
// this agent's to wait for, and neither while a reply can still come.
func (s *Session) replied(m *hubv1.Message) (*hubv1.Message, *Error) {
	if m.GetFromAgentId() != s.Agent.GetId() {
		return nil, &Error{Code: "message_forbidden", Message: "message " + m.GetId() + " was not sent by this agent: only its sender receives its reply", Metadata: map[string]string{"messageId": m.GetId()}}
	}
	if m.GetReply() != nil {
		return m, nil
	}
	switch m.GetStatus() {
	case hubv1.MessageStatus_MESSAGE_STATUS_CANCELLED, hubv1.MessageStatus_MESSAGE_STATUS_EXPIRED, hubv1.MessageStatus_MESSAGE_STATUS_ERROR:
		return nil, messageEnded(m, m.GetStatus())
	}
	return nil, nil
}

// messageEnded is the error of a message that ended without a reply: status names how.
func messageEnded(m *hubv1.Message, status hubv1.MessageStatus) *Error {
	name := strings.ToLower(strings.TrimPrefix(status.String(), "MESSAGE_STATUS_"))
	e := &Error{
		Code:     "message_ended",
		Message:  "message " + m.GetId() + " ended " + name + " without a reply",
		Metadata: map[string]string{"messageId": m.GetId(), "status": name},
	}
	if m.Error != nil {
		e.Metadata["error"] = m.GetError()
		e.Message += ": " + m.GetError()
	}
	return e
}
