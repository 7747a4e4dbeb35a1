// Package kxmhub is the client library for kxm-hub over the generated Connect clients
// (github.com/kxm-dev/kxm-hub/gen/go/kxm/hub/v1): a Session that registers the agent, sends its
// credentials and heartbeats; a Lease kept renewed with a loss signal; blocking acquire; an inbox
// that resumes; a sender's wait for its reply (AwaitReply); one Error type.
package kxmhub

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"connectrpc.com/connect"

	hubv1 "github.com/kxm-dev/kxm-hub/gen/go/kxm/hub/v1"
	"github.com/kxm-dev/kxm-hub/gen/go/kxm/hub/v1/hubv1connect"
)

// Options says which hub, which project and which agent.
type Options struct {
	URL     string // the hub's base URL, e.g. http://127.0.0.1:7331 or https://hub.example:7331
	Project string
	Name    string // the agent's name; a registration resumes the offline agent of that name
	Token   string // the project's token; empty on a loopback hub without tokens
	Purpose string
	Model   string
	Host    string // default: os.Hostname()
	// HeartbeatEvery defaults to 10 s, well inside the hub's default stale-after of 30 s.
	HeartbeatEvery time.Duration
	// HTTPClient defaults to http.DefaultClient (Connect over HTTP/1.1; HTTP/2 by ALPN for an
	// https:// URL), or to NewHTTPClient(TLS) when TLS is set.
	HTTPClient connect.HTTPClient
	// TLS, for an https:// URL: the CA file to trust instead of the system's CAs, and the client
	// certificate and key for a hub with mutual TLS. Used when HTTPClient is nil.
	TLS TLSFiles
	// ClientOptions are added to every generated client (connect.WithGRPC(), interceptors).
	ClientOptions []connect.ClientOption
	// Clock defaults to the system clock.
	Clock Clock
	// Takeover replaces an instance of this name that is still marked online (a restart that
	// cannot wait for the crashed instance to go stale) instead of failing with
	// duplicate_agent_name. At once: the old instance's key stops working (its calls and streams
	// are refused with invalid_agent_identity), its leases are released with their tokens kept
	// as floors (the next grant of each gets a higher token) and its waiting acquires leave their
	// queues; the agent keeps its id and its inbox. Session.TakenOver and ReleasedLeases say
	// what it replaced.
	Takeover bool
}

// String is the options as they may be printed or logged: the token is never shown, only
// whether there is one. fmt uses it for %v and %+v (and GoString for %#v).
func (o Options) String() string {
	token := ""
	if o.Token != "" {
		token = "[redacted]"
	}
	return fmt.Sprintf("kxmhub.Options{URL: %q, Project: %q, Name: %q, Token: %q, Purpose: %q, Model: %q, Host: %q, HeartbeatEvery: %s, TLS: %+v, Takeover: %t}",
		o.URL, o.Project, o.Name, token, o.Purpose, o.Model, o.Host, o.HeartbeatEvery, o.TLS, o.Takeover)
}

// GoString is String: %#v shows no token either.
func (o Options) GoString() string { return o.String() }

// Named is these options for another agent of the same hub and project.
func (o Options) Named(name string) Options {
	o.Name = name
	return o
}

// Session is an agent's session with the hub: registered (or resumed) by Connect, its
// credentials on every call, a heartbeat while it lives, unregistered by Close. Done is closed
// when the hub refuses the agent or three heartbeats in a row fail; Err says why.
type Session struct {
	Agent *hubv1.Agent
	// TakenOver is true when Options.Takeover replaced an instance that was still online;
	// ReleasedLeases names the leases that instance held, which the takeover released.
	TakenOver      bool
	ReleasedLeases []string

	Presence hubv1connect.PresenceServiceClient
	Leases   hubv1connect.LeaseServiceClient
	Peer     hubv1connect.PeerServiceClient

	clock   Clock
	done    chan struct{}
	closing chan struct{}
	// closeOnce closes closing once: two Close calls may race.
	closeOnce sync.Once
	// beatCtx is the context of each heartbeat call; Close cancels it (stopBeats), so that a
	// heartbeat a silent hub never answers does not hold Close up.
	beatCtx   context.Context
	stopBeats context.CancelFunc
	beats     sync.WaitGroup
	mu        sync.Mutex
	err       error
	held      map[*Lease]struct{}
	// acquiring counts the Acquire calls in flight, by lease name.
	acquiring map[string]int
	// unsettled holds, by lease name, a channel closed when the look after an Acquire that got
	// no answer is done (settleUnanswered); looks counts them for Close.
	unsettled map[string]chan struct{}
	// lookLater names the leases whose look waits for the Acquires of the name in flight to end.
	lookLater map[string]bool
	looks     sync.WaitGroup
	// noLooks is set by Close before it waits for looks: no new one starts after.
	noLooks bool
}

// Connect registers (or resumes) the agent and starts its heartbeats. A name still online is
// duplicate_agent_name, unless Options.Takeover replaces that instance.
func Connect(ctx context.Context, o Options) (*Session, error) {
	// A client of its own (o.TLS's, or the default) has a TLS configuration Connect knows.
	own := o.HTTPClient == nil
	var tlsConfig *tls.Config
	if own && !o.TLS.IsZero() {
		// TLS files for a hub reached in clear would not be used, and the token and agent key
		// would travel unprotected while the caller thinks otherwise.
		if u, err := url.Parse(o.URL); err != nil || u.Scheme != "https" {
			return nil, &Error{Code: "invalid_tls_config", Message: "TLS files are given but the hub's URL is not https://: use https://, or drop them", Metadata: map[string]string{}}
		}
		cfg, err := o.TLS.Config()
		if err != nil {
			return nil, err
		}
		tlsConfig, o.HTTPClient = cfg, httpClientWith(cfg)
	}
	if o.HTTPClient == nil {
		o.HTTPClient = http.DefaultClient
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	if o.HeartbeatEvery == 0 {
		o.HeartbeatEvery = 10 * time.Second
	}
	if o.Host == "" {
		o.Host, _ = os.Hostname()
		if len(o.Host) > 64 {
			o.Host = o.Host[:64]
		}
	}
	creds := &credentials{token: o.Token}
	opts := append([]connect.ClientOption{connect.WithInterceptors(creds)}, o.ClientOptions...)
	s := &Session{
		Presence:  hubv1connect.NewPresenceServiceClient(o.HTTPClient, o.URL, opts...),
		Leases:    hubv1connect.NewLeaseServiceClient(o.HTTPClient, o.URL, opts...),
		Peer:      hubv1connect.NewPeerServiceClient(o.HTTPClient, o.URL, opts...),
		clock:     o.Clock,
		done:      make(chan struct{}),
		closing:   make(chan struct{}),
		held:      map[*Lease]struct{}{},
		acquiring: map[string]int{},
		unsettled: map[string]chan struct{}{},
		lookLater: map[string]bool{},
	}
	req := &hubv1.RegisterAgentRequest{Name: o.Name, Project: o.Project, Host: &o.Host, Takeover: o.Takeover}
	if o.Purpose != "" {
		req.Purpose = &o.Purpose
	}
	if o.Model != "" {
		req.Model = &o.Model
	}
	res, err := s.Presence.RegisterAgent(ctx, connect.NewRequest(req))
	if err != nil {
		e := AsError(err)
		// A broken pipe comes back as "cancelled": not the caller's doing while ctx lives.
		if own && ctx.Err() == nil && (e.Code == "unavailable" || e.Code == "cancelled" || e.Code == "unknown") {
			// The HTTP client may have lost why TLS failed: one handshake of its own says.
			if f := handshakeFailure(ctx, o.URL, tlsConfig); f != nil {
				return nil, &Error{Code: "tls_failed", Message: "TLS with the hub failed: " + f.Error(), Metadata: map[string]string{}, cause: f}
			}
		}
		return nil, e
	}
	s.Agent, s.TakenOver, s.ReleasedLeases = res.Msg.GetAgent(), res.Msg.GetTakenOver(), res.Msg.GetReleasedLeases()
	creds.set(s.Agent.GetId(), res.Msg.GetAgentKey())
	s.beatCtx, s.stopBeats = context.WithCancel(context.Background())
	s.beats.Add(1)
	go s.heartbeat(o.HeartbeatEvery)
	return s, nil
}

// Done is closed when the session is lost (or closed).
func (s *Session) Done() <-chan struct{} { return s.done }

// Err says why Done is closed.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *Session) lose(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
		close(s.done)
	}
}

// Send messages an agent of the project (its id or name).
func (s *Session) Send(ctx context.Context, target, content string) (*hubv1.Message, error) {
	res, err := s.Peer.SendMessage(ctx, connect.NewRequest(&hubv1.SendMessageRequest{Target: target, Content: content}))
	if err != nil {
		return nil, AsError(err)
	}
	return res.Msg.GetMessage(), nil
}

// Close releases the leases still held, stops the heartbeats and unregisters the agent. It waits
// for what is under way (the looks after unanswered Acquires, a heartbeat in flight, which it
// cancels) until ctx ends.
func (s *Session) Close(ctx context.Context) error {
	for _, l := range s.heldLeases() {
		_ = l.Release(ctx)
	}
	s.mu.Lock()
	s.noLooks = true
	s.mu.Unlock()
	looked := make(chan struct{})
	go func() {
		s.looks.Wait()
		close(looked)
	}()
	select {
	case <-looked:
	case <-ctx.Done():
	}
	s.closeOnce.Do(func() {
		close(s.closing)
		s.stopBeats()
	})
	beaten := make(chan struct{})
	go func() {
		s.beats.Wait()
		close(beaten)
	}()
	select {
	case <-beaten:
	case <-ctx.Done():
	}
	if s.Err() != nil {
		return nil
	}
	s.lose(&Error{Code: "closed", Message: "the session was closed"})
	_, err := s.Presence.UnregisterAgent(ctx, connect.NewRequest(&hubv1.UnregisterAgentRequest{AgentId: s.Agent.GetId()}))
	return AsError(err).orNil()
}

// heldLeases is the leases the session holds now, copied: releasing or losing one changes the set.
func (s *Session) heldLeases() []*Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := make([]*Lease, 0, len(s.held))
	for l := range s.held {
		held = append(held, l)
	}
	return held
}

func (s *Session) heartbeat(every time.Duration) {
	defer s.beats.Done()
	failures := 0
	for {
		select {
		case <-s.closing:
			return
		case <-s.clock.After(every):
		}
		ctx, cancel := context.WithTimeout(s.beatCtx, every)
		_, err := s.Presence.Heartbeat(ctx, connect.NewRequest(&hubv1.HeartbeatRequest{AgentId: s.Agent.GetId()}))
		cancel()
		select {
		case <-s.closing:
			// Cancelled by Close (or answered while it closes): not a failure of the session.
			return
		default:
		}
		if err == nil {
			failures = 0
			continue
		}
		if e := AsError(err); !e.Transient || failures+1 >= 3 {
			s.lose(e)
			// Refused for good (its key no longer works: taken over, evicted): what it holds is
			// lost with it, at once, not at the next renewal.
			if !e.Transient {
				for _, l := range s.heldLeases() {
					l.stopOnce.Do(func() { close(l.stop) })
					l.lose(e)
				}
			}
			return
		}
		failures++
	}
}

func (e *Error) orNil() error {
	if e == nil {
		return nil
	}
	return e
}

// credentials adds the project token and, once registered, the agent's id and key to every call.
type credentials struct {
	token   string
	mu      sync.RWMutex
	id, key string
}

func (c *credentials) set(id, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.id, c.key = id, key
}

func (c *credentials) apply(h http.Header) {
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.id != "" {
		h.Set("X-Kxm-Agent-Id", c.id)
		h.Set("X-Kxm-Agent-Key", c.key)
	}
}

func (c *credentials) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		c.apply(req.Header())
		return next(ctx, req)
	}
}

func (c *credentials) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		c.apply(conn.RequestHeader())
		return conn
	}
}

func (c *credentials) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
