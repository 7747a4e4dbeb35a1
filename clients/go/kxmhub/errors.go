package kxmhub

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	hubv1 "github.com/kxm-dev/kxm-hub/gen/go/kxm/hub/v1"
)

// Error is a refusal from the hub, whatever the call: its Code ("lease_held", "cursor_expired",
// …, the hub's error table), the facts in Metadata, and the Lease it concerns when there is one.
// Anything that is not a hub refusal (the hub unreachable, a cancelled call) is an Error with
// Code "unavailable", "cancelled" or "unknown"; Transient says whether trying again may succeed.
// A failed TLS handshake (a hub certificate no trusted CA signed, a client certificate the hub
// wants and did not get) is "tls_failed", not transient; TLS files Connect cannot use are
// "invalid_tls_config".
// The library's own codes: lease_unconfirmed, released and closed (Lease.Err, Session.Err), and
// message_ended (AwaitReply: the message was cancelled or expired, Metadata "status" says which).
type Error struct {
	Code      string
	Message   string
	Metadata  map[string]string
	Lease     *hubv1.Lease
	Transient bool
	cause     error
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }
func (e *Error) Unwrap() error { return e.cause }

// Is matches another *Error by code: errors.Is(err, &kxmhub.Error{Code: "lease_held"}).
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code
}

// AsError types the error of a failed call (nil stays nil).
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		if isTLSFailure(err) {
			return &Error{Code: "tls_failed", Message: "TLS with the hub failed: " + err.Error(), Metadata: map[string]string{}, cause: err}
		}
		// The caller's own cancellation, met before any call went out (a wait of the library's
		// own): cancelled, as a call cancelled on the wire is, not an outage to retry.
		if errors.Is(err, context.Canceled) {
			return &Error{Code: "cancelled", Message: err.Error(), Metadata: map[string]string{}, cause: err}
		}
		return &Error{Code: "unavailable", Message: err.Error(), Transient: true, cause: err}
	}
	out := &Error{Message: ce.Message(), Metadata: map[string]string{}, cause: err}
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if derr != nil {
			continue
		}
		switch m := v.(type) {
		case *errdetails.ErrorInfo:
			if m.GetDomain() == "kxm-hub" {
				out.Code = strings.ToLower(m.GetReason())
				for k, val := range m.GetMetadata() {
					out.Metadata[k] = val
				}
			}
		case *hubv1.Lease:
			out.Lease = m
		}
	}
	switch {
	case out.Code != "":
		// Over the rate or the stream's lag: later. A body over the limit fails the same way again.
		out.Transient = ce.Code() == connect.CodeUnavailable || (ce.Code() == connect.CodeResourceExhausted && out.Code != "payload_too_large")
	case isTLSFailure(err):
		out.Code, out.Message = "tls_failed", "TLS with the hub failed: "+ce.Message()
	// The caller's context, cancelled: connect wraps its error.
	case ce.Code() == connect.CodeCanceled && errors.Is(err, context.Canceled):
		out.Code = "cancelled"
	// No answer from the hub: it is away, or the connection broke under the call (a stream the
	// hub's end reset with CANCEL is Canceled too, with no cancelled context under it). Try again.
	case ce.Code() == connect.CodeUnavailable, ce.Code() == connect.CodeDeadlineExceeded, ce.Code() == connect.CodeUnknown, ce.Code() == connect.CodeInternal, ce.Code() == connect.CodeAborted, ce.Code() == connect.CodeCanceled:
		out.Code, out.Transient = "unavailable", true
	default:
		out.Code = "unknown"
	}
	return out
}
