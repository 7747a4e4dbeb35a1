// Package scenario runs the issue #5 scenario against a running kxm hub with the generated Go
// client (gen/go, used through the replace directive in go.mod), once over the Connect protocol
// and once over gRPC (h2c).
//
// It needs three environment variables (test/clients/go.test.ts sets them):
//
//	KXM_HUB_URL        the hub's base URL, e.g. http://127.0.0.1:7331
//	KXM_CONTROL_URL    the test control port (POST /advance?ms=N moves the hub's fake clock)
//	KXM_PROJECT_TOKEN  the bearer token of project "clients"
package scenario

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"

	hubv1 "github.com/kxm-dev/kxm-hub/gen/go/kxm/hub/v1"
	"github.com/kxm-dev/kxm-hub/gen/go/kxm/hub/v1/hubv1connect"
)

const (
	project = "clients"
	// waitTimeout bounds every unary call and every wait for a stream frame.
	waitTimeout = 10 * time.Second
)

func TestScenarioConnect(t *testing.T) {
	// Connect protocol (binary protobuf) over HTTP/1.1.
	transport := requireHTTP(1, &http.Transport{})
	runScenario(t, "connect", "gocon", &http.Client{Transport: transport})
}

func TestScenarioGRPC(t *testing.T) {
	// gRPC needs HTTP/2; against an http:// URL that means h2c with prior knowledge.
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	transport := requireHTTP(2, &http.Transport{Protocols: &protocols})
	runScenario(t, "grpc", "gogrpc", &http.Client{Transport: transport}, connect.WithGRPC())
}

// requireHTTP wraps a transport so that every response must have come over HTTP/`major`: the
// gRPC run really is h2c, the Connect run really is HTTP/1.1.
func requireHTTP(major int, base http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		res, err := base.RoundTrip(req)
		if err == nil && res.ProtoMajor != major {
			res.Body.Close()
			return nil, fmt.Errorf("%s %s answered over %s, want HTTP/%d", req.Method, req.URL.Path, res.Proto, major)
		}
		return res, err
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// env is what the scenario reads from the environment.
type env struct {
	hubURL, controlURL, token string
}

func loadEnv(t *testing.T) env {
	t.Helper()
	e := env{
		hubURL:     os.Getenv("KXM_HUB_URL"),
		controlURL: os.Getenv("KXM_CONTROL_URL"),
		token:      os.Getenv("KXM_PROJECT_TOKEN"),
	}
	if e.hubURL == "" || e.controlURL == "" || e.token == "" {
		t.Fatalf("KXM_HUB_URL, KXM_CONTROL_URL and KXM_PROJECT_TOKEN must all be set (got %q, %q, token set: %v); "+
			"run through `npx vitest run test/clients/go.test.ts`", e.hubURL, e.controlURL, e.token != "")
	}
	return e
}

// hub builds clients of the generated services over one protocol and HTTP client.
type hub struct {
	env
	httpClient *http.Client
	opts       []connect.ClientOption
}

// agent is a registered agent and the clients that call as it.
type agent struct {
	id, name string
	leases   hubv1connect.LeaseServiceClient
	peer     hubv1connect.PeerServiceClient
}

// withHeaders is a client interceptor that sets fixed request headers (gRPC metadata alike) on
// every unary call and stream.
type withHeaders map[string]string

func (h withHeaders) set(header http.Header) {
	for k, v := range h {
		header.Set(k, v)
	}
}

func (h withHeaders) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		h.set(req.Header())
		return next(ctx, req)
	}
}

func (h withHeaders) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		h.set(conn.RequestHeader())
		return conn
	}
}

func (h withHeaders) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// options returns the hub's client options plus an interceptor adding headers.
func (h *hub) options(headers withHeaders) []connect.ClientOption {
	return append([]connect.ClientOption{connect.WithInterceptors(headers)}, h.opts...)
}

// bearer are the headers of a project-token call.
func (h *hub) bearer() withHeaders {
	return withHeaders{"Authorization": "Bearer " + h.token}
}

func (h *hub) presence() hubv1connect.PresenceServiceClient {
	return hubv1connect.NewPresenceServiceClient(h.httpClient, h.hubURL, h.options(h.bearer())...)
}

func (h *hub) sync() hubv1connect.SyncServiceClient {
	return hubv1connect.NewSyncServiceClient(h.httpClient, h.hubURL, h.options(h.bearer())...)
}

// register registers an agent in project "clients" and returns clients calling as it.
func (h *hub) register(t *testing.T, name string) *agent {
	t.Helper()
	res, err := h.presence().RegisterAgent(within(t), connect.NewRequest(&hubv1.RegisterAgentRequest{
		Name:    name,
		Project: project,
		Purpose: proto.String("issue #5 Go client scenario"),
	}))
	if err != nil {
		t.Fatalf("RegisterAgent %s: %v", name, err)
	}
	a := res.Msg.GetAgent()
	if a.GetName() != name || a.GetProject() != project || res.Msg.GetAgentKey() == "" {
		t.Fatalf("RegisterAgent %s: unexpected answer %v", name, res.Msg)
	}
	headers := h.bearer()
	headers["X-Kxm-Agent-Id"] = a.GetId()
	headers["X-Kxm-Agent-Key"] = res.Msg.GetAgentKey()
	opts := h.options(headers)
	return &agent{
		id:     a.GetId(),
		name:   name,
		leases: hubv1connect.NewLeaseServiceClient(h.httpClient, h.hubURL, opts...),
		peer:   hubv1connect.NewPeerServiceClient(h.httpClient, h.hubURL, opts...),
	}
}

// advance moves the hub's fake clock through the control port.
func (h *hub) advance(t *testing.T, ms int) {
	t.Helper()
	req, err := http.NewRequestWithContext(within(t), http.MethodPost, fmt.Sprintf("%s/advance?ms=%d", h.controlURL, ms), nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("advance the hub clock: %v", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("advance the hub clock: %d %s", res.StatusCode, body)
	}
}

// within is a context for one call, bounded by waitTimeout.
func within(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// step runs one step of the scenario as a subtest and stops the scenario when it fails.
func step(t *testing.T, name string, fn func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, fn) {
		t.FailNow()
	}
}

// refusal is what an RPC client learns from a refused call.
type refusal struct {
	code  connect.Code
	info  *errdetails.ErrorInfo
	lease *hubv1.Lease
}

// refusalOf reads the Connect code and the typed details of a refused call.
func refusalOf(t *testing.T, call string, err error) refusal {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: expected a refusal, but the call succeeded", call)
	}
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("%s: not a *connect.Error: %v", call, err)
	}
	r := refusal{code: connect.CodeOf(err)}
	for _, d := range cerr.Details() {
		v, derr := d.Value()
		if derr != nil {
			t.Fatalf("%s: cannot decode detail %s: %v", call, d.Type(), derr)
		}
		switch v := v.(type) {
		case *errdetails.ErrorInfo:
			r.info = v
		case *hubv1.Lease:
			r.lease = v
		}
	}
	if r.info == nil {
		t.Fatalf("%s: refusal without google.rpc.ErrorInfo: %v", call, err)
	}
	if r.info.GetDomain() != "kxm-hub" {
		t.Fatalf("%s: ErrorInfo domain %q, want kxm-hub", call, r.info.GetDomain())
	}
	return r
}

// expectRefusal checks a lease refusal: Connect code, ErrorInfo reason and the Lease detail.
func expectRefusal(t *testing.T, call string, err error, code connect.Code, reason string) refusal {
	t.Helper()
	r := refusalOf(t, call, err)
	if r.code != code || r.info.GetReason() != reason {
		t.Fatalf("%s: got %s %s, want %s %s (%v)", call, r.code, r.info.GetReason(), code, reason, err)
	}
	if r.lease == nil {
		t.Fatalf("%s: %s refusal without a kxm.hub.v1.Lease detail", call, reason)
	}
	t.Logf("%s refused as expected: %s %s metadata=%v lease={holder=%s token=%d}",
		call, r.code, r.info.GetReason(), r.info.GetMetadata(), r.lease.GetHolderAgentName(), r.lease.GetFencingToken())
	return r
}

// inbox is an open Subscribe stream whose frames arrive on a channel, so every wait can be
// bounded.
type inbox struct {
	who    string
	frames chan *hubv1.SubscribeResponse
	err    error // why the stream ended; read only after frames is closed
}

// subscribe opens the agent's Subscribe stream; it is closed when the test ends.
func subscribe(t *testing.T, a *agent) *inbox {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := a.peer.Subscribe(ctx, connect.NewRequest(&hubv1.SubscribeRequest{}))
	if err != nil {
		cancel()
		t.Fatalf("Subscribe as %s: %v", a.name, err)
	}
	in := &inbox{who: a.name, frames: make(chan *hubv1.SubscribeResponse, 64)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(in.frames)
		for stream.Receive() {
			select {
			case in.frames <- stream.Msg():
			case <-ctx.Done():
				return
			}
		}
		in.err = stream.Err()
	}()
	t.Cleanup(func() {
		cancel()
		_ = stream.Close()
		<-done
	})
	return in
}

// frameKind names a frame's event for logs and failures.
func frameKind(f *hubv1.SubscribeResponse) string {
	switch f.GetEvent().(type) {
	case *hubv1.SubscribeResponse_Ready:
		return "ready"
	case *hubv1.SubscribeResponse_Message:
		return "message"
	case *hubv1.SubscribeResponse_Reply:
		return "reply"
	case *hubv1.SubscribeResponse_Cancelled:
		return "cancelled"
	case *hubv1.SubscribeResponse_Expired:
		return "expired"
	case *hubv1.SubscribeResponse_Presence:
		return "presence"
	case *hubv1.SubscribeResponse_KeepAlive:
		return "keep_alive"
	default:
		return fmt.Sprintf("unknown(%T)", f.GetEvent())
	}
}

// next waits (at most waitTimeout) for the next frame of kind `want`, skipping ready, presence
// and keep_alive frames; any other frame fails the test.
func (in *inbox) next(t *testing.T, want string) *hubv1.SubscribeResponse {
	t.Helper()
	timeout := time.NewTimer(waitTimeout)
	defer timeout.Stop()
	for {
		select {
		case f, ok := <-in.frames:
			if !ok {
				t.Fatalf("%s's stream ended while waiting for a %s frame: %v", in.who, want, in.err)
			}
			kind := frameKind(f)
			switch {
			case kind == want:
				return f
			case kind == "ready" || kind == "presence" || kind == "keep_alive":
				t.Logf("%s's stream: skipped a %s frame (cursor %d)", in.who, kind, f.GetCursor())
			default:
				t.Fatalf("%s's stream: got a %s frame while waiting for %s: %v", in.who, kind, want, f)
			}
		case <-timeout.C:
			t.Fatalf("%s's stream: no %s frame within %s", in.who, want, waitTimeout)
		}
	}
}

// randomHex is n random bytes as hex, to keep names unique when the hub outlives one run.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func sha(c string) *string {
	s := "sha256:"
	for range 64 {
		s += c
	}
	return &s
}

// syncEvent is a valid kxm.sync-event.v1 event (test/sync/fixtures.ts's syncEvent) at `seq`.
func syncEvent(runtimeID, projectID, runID string, seq int64) *hubv1.SyncEvent {
	return &hubv1.SyncEvent{
		Schema:                 proto.String("kxm.sync-event.v1"),
		SourceEventId:          proto.String(fmt.Sprintf("evt_source%04d", seq)),
		ProjectId:              proto.String(projectID),
		RunId:                  proto.String(runID),
		HomeRuntimeId:          proto.String(runtimeID),
		MemoryRevision:         proto.String("mem_memory0001"),
		EventType:              proto.String("run.status_changed"),
		Sequence:               proto.Int64(seq),
		OccurredAt:             proto.String("2026-01-01T12:00:00.123Z"),
		ConfigRevision:         sha("a"),
		ExecutorPolicyRevision: sha("b"),
		ToolPolicyRevision:     sha("c"),
		SyncPolicyRevision:     sha("d"),
		Redaction:              &hubv1.Redaction{Version: proto.String("v1"), FieldsOmitted: []string{}, ValuesReplaced: proto.Int64(0)},
		Payload: &hubv1.SyncPayload{
			Status:       proto.String("running"),
			WorkflowId:   proto.String("wf-build"),
			DisplayTitle: proto.String("Build it"),
		},
	}
}

// runScenario is issue #5's scenario over one protocol. `tag` ("go-connect", "go-grpc") makes
// agent and lease names unique per run; `short` is the runtime-id prefix.
func runScenario(t *testing.T, protocol, short string, httpClient *http.Client, opts ...connect.ClientOption) {
	h := &hub{env: loadEnv(t), httpClient: httpClient, opts: opts}
	run := randomHex(3)
	tag := "go-" + protocol
	t.Logf("protocol %s against %s, run %s", protocol, h.hubURL, run)

	var alpha, beta *agent
	lease := fmt.Sprintf("deploy-%s-%s", tag, run)

	step(t, "1_register_two_agents", func(t *testing.T) {
		alpha = h.register(t, fmt.Sprintf("alpha-%s-%s", tag, run))
		beta = h.register(t, fmt.Sprintf("beta-%s-%s", tag, run))
		t.Logf("registered %s (%s) and %s (%s)", alpha.name, alpha.id, beta.name, beta.id)
	})

	step(t, "2_acquire_and_renew", func(t *testing.T) {
		acq, err := alpha.leases.AcquireLease(within(t), connect.NewRequest(&hubv1.AcquireLeaseRequest{Name: lease, TtlMs: proto.Int32(5000)}))
		if err != nil {
			t.Fatalf("AcquireLease as %s: %v", alpha.name, err)
		}
		if got := acq.Msg.GetLease(); got.GetFencingToken() != 1 || acq.Msg.GetRenewed() || got.GetHolderAgentName() != alpha.name {
			t.Fatalf("AcquireLease: got %v, want token 1, renewed false, holder %s", acq.Msg, alpha.name)
		}
		ren, err := alpha.leases.RenewLease(within(t), connect.NewRequest(&hubv1.RenewLeaseRequest{Name: lease, FencingToken: proto.Int64(1), TtlMs: proto.Int32(5000)}))
		if err != nil {
			t.Fatalf("RenewLease as %s: %v", alpha.name, err)
		}
		if !ren.Msg.GetRenewed() || ren.Msg.GetLease().GetFencingToken() != 1 {
			t.Fatalf("RenewLease: got %v, want renewed true, token 1", ren.Msg)
		}
		t.Logf("%s holds %s with fencing token 1 (renewed)", alpha.name, lease)
	})

	step(t, "3_second_agent_refused_lease_held", func(t *testing.T) {
		_, err := beta.leases.AcquireLease(within(t), connect.NewRequest(&hubv1.AcquireLeaseRequest{Name: lease, TtlMs: proto.Int32(5000)}))
		r := expectRefusal(t, "AcquireLease as "+beta.name, err, connect.CodeAborted, "LEASE_HELD")
		if got := r.info.GetMetadata()["holderAgentName"]; got != alpha.name {
			t.Errorf("metadata holderAgentName = %q, want %q", got, alpha.name)
		}
		if r.lease.GetHolderAgentName() != alpha.name || r.lease.GetHolderAgentId() != alpha.id || r.lease.GetFencingToken() != 1 || r.lease.GetName() != lease {
			t.Errorf("Lease detail = %v, want %s held by %s with token 1", r.lease, lease, alpha.name)
		}
	})

	step(t, "4_lapse_takeover_superseded", func(t *testing.T) {
		h.advance(t, 5001)
		acq, err := beta.leases.AcquireLease(within(t), connect.NewRequest(&hubv1.AcquireLeaseRequest{Name: lease, TtlMs: proto.Int32(5000)}))
		if err != nil {
			t.Fatalf("AcquireLease as %s after the lapse: %v", beta.name, err)
		}
		if got := acq.Msg.GetLease(); got.GetFencingToken() != 2 || acq.Msg.GetRenewed() || got.GetHolderAgentName() != beta.name {
			t.Fatalf("takeover: got %v, want token 2, renewed false, holder %s", acq.Msg, beta.name)
		}
		_, err = alpha.leases.RenewLease(within(t), connect.NewRequest(&hubv1.RenewLeaseRequest{Name: lease, FencingToken: proto.Int64(1), TtlMs: proto.Int32(5000)}))
		r := expectRefusal(t, "RenewLease as "+alpha.name+" with token 1", err, connect.CodeAborted, "LEASE_SUPERSEDED")
		if r.lease.GetHolderAgentName() != beta.name || r.lease.GetFencingToken() != 2 {
			t.Errorf("Lease detail = %v, want held by %s with token 2", r.lease, beta.name)
		}
	})

	step(t, "5_message_ack_reply_over_streams", func(t *testing.T) {
		betaInbox := subscribe(t, beta)
		alphaInbox := subscribe(t, alpha)
		// Both streams are live once their ready frame arrived: the reply is a live-only event.
		betaInbox.next(t, "ready")
		alphaInbox.next(t, "ready")

		content := fmt.Sprintf("please deploy (%s, %s)", protocol, run)
		sent, err := alpha.peer.SendMessage(within(t), connect.NewRequest(&hubv1.SendMessageRequest{Target: beta.name, Content: content}))
		if err != nil {
			t.Fatalf("SendMessage %s -> %s: %v", alpha.name, beta.name, err)
		}
		id := sent.Msg.GetMessage().GetId()

		got := betaInbox.next(t, "message").GetMessage()
		if got.GetId() != id || got.GetContent() != content || got.GetFromName() != alpha.name {
			t.Fatalf("%s received %v, want message %s from %s with content %q", beta.name, got, id, alpha.name, content)
		}
		ack, err := beta.peer.AckMessage(within(t), connect.NewRequest(&hubv1.AckMessageRequest{MessageId: id}))
		if err != nil {
			t.Fatalf("AckMessage: %v", err)
		}
		if s := ack.Msg.GetMessage().GetStatus(); s != hubv1.MessageStatus_MESSAGE_STATUS_DELIVERED {
			t.Fatalf("AckMessage: status %s, want DELIVERED", s)
		}
		replyContent := "deployed with token 2 (" + run + ")"
		rep, err := beta.peer.ReplyMessage(within(t), connect.NewRequest(&hubv1.ReplyMessageRequest{MessageId: id, Content: replyContent}))
		if err != nil {
			t.Fatalf("ReplyMessage: %v", err)
		}
		if s := rep.Msg.GetMessage().GetStatus(); s != hubv1.MessageStatus_MESSAGE_STATUS_REPLIED {
			t.Fatalf("ReplyMessage: status %s, want REPLIED", s)
		}

		replied := alphaInbox.next(t, "reply").GetReply()
		if replied.GetId() != id || replied.GetReply().GetContent() != replyContent {
			t.Fatalf("%s received reply %v, want message %s replied %q", alpha.name, replied, id, replyContent)
		}
		t.Logf("%s got %q; %s got the reply %q", beta.name, content, alpha.name, replyContent)
	})

	step(t, "6_runtime_pushes_sync_events", func(t *testing.T) {
		runtimeID := fmt.Sprintf("rtm_%s%s", short, run)
		projectID := fmt.Sprintf("prj_%s%s", short, run)
		runID := fmt.Sprintf("run_%s%s", short, run)
		events := []*hubv1.SyncEvent{
			syncEvent(runtimeID, projectID, runID, 1),
			syncEvent(runtimeID, projectID, runID, 2),
			syncEvent(runtimeID, projectID, runID, 3),
		}
		sync := h.sync()
		pushed, err := sync.PushEvents(within(t), connect.NewRequest(&hubv1.PushEventsRequest{Project: project, RuntimeId: runtimeID, Events: events}))
		if err != nil {
			t.Fatalf("PushEvents: %v", err)
		}
		results := pushed.Msg.GetResults()
		if len(results) != 3 {
			t.Fatalf("PushEvents: %d results, want 3: %v", len(results), pushed.Msg)
		}
		for i, r := range results {
			if r.GetOutcome() != hubv1.SyncOutcome_SYNC_OUTCOME_ACCEPTED || r.GetSequence() != int64(i+1) {
				t.Errorf("event %d: %v, want sequence %d accepted", i+1, r, i+1)
			}
		}
		cur, err := sync.GetCursor(within(t), connect.NewRequest(&hubv1.GetCursorRequest{Project: project, ProjectId: projectID, RunId: runID}))
		if err != nil {
			t.Fatalf("GetCursor: %v", err)
		}
		if c := cur.Msg.GetCursor(); c.GetCursor() != 3 || c.GetProjectId() != projectID || c.GetRunId() != runID {
			t.Fatalf("GetCursor: %v, want %s/%s at 3", c, projectID, runID)
		}
		t.Logf("runtime %s: 3 events accepted, cursor of %s/%s is 3", runtimeID, projectID, runID)
	})
}
