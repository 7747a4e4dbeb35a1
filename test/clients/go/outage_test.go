package scenario

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"iter"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/kxm-dev/kxm-hub/clients/go/kxmhub"
	hubv1 "github.com/kxm-dev/kxm-hub/gen/go/kxm/hub/v1"
)

// The library against a hub process this test starts, SIGKILLs and starts again on the same file
// and port (real time): KXM_NODE and KXM_HUB_BIN say how to run `kxm-hub serve`.

type hubProcess struct {
	cmd *exec.Cmd
	url string
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startHubProcess(t *testing.T, port int, dataPath string, env ...string) *hubProcess {
	t.Helper()
	node, bin := os.Getenv("KXM_NODE"), os.Getenv("KXM_HUB_BIN")
	if node == "" || bin == "" {
		t.Fatal("KXM_NODE and KXM_HUB_BIN must be set (run through `npx vitest run test/clients/go.test.ts`)")
	}
	cmd := exec.Command(node, bin, "serve", "--port", fmt.Sprint(port), "--data-path", dataPath, "--log-path", "-")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "kxm hub listening at ") {
				ready <- strings.TrimSuffix(strings.Fields(line)[4], ";")
			}
		}
	}()
	select {
	case url := <-ready:
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return &hubProcess{cmd: cmd, url: url}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("kxm-hub did not start")
		return nil
	}
}

// sendToReader sends text to the agent "reader", again while the hub says it is not there: after
// a restart the reader is offline until its inbox reconnects.
func sendToReader(t *testing.T, sender *kxmhub.Session, text string) *hubv1.Message {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		m, err := sender.Send(within(t), "reader", text)
		var herr *kxmhub.Error
		if errors.As(err, &herr) && herr.Code == "target_not_found" && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
}

func (h *hubProcess) kill() {
	_ = h.cmd.Process.Kill() // SIGKILL
	_ = h.cmd.Wait()
}

func TestLibraryLeaseThroughAShortOutageAndLostBeforeItsTTLInALongOne(t *testing.T) {
	dir := t.TempDir()
	port, dataPath := freePort(t), filepath.Join(dir, "kxm.db")
	hub := startHubProcess(t, port, dataPath)
	s, err := kxmhub.Connect(within(t), kxmhub.Options{URL: hub.url, Project: "p", Name: "survivor", HeartbeatEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 6 * time.Second
	l, err := s.Acquire(within(t), "db", kxmhub.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}

	// Short: down for about a second, then back on the same file and port.
	hub.kill()
	time.Sleep(time.Second)
	hub = startHubProcess(t, port, dataPath)
	time.Sleep(ttl)
	select {
	case <-l.Lost():
		t.Fatalf("lost through a short outage: %v", l.Err())
	default:
	}
	got, err := s.Leases.GetLease(within(t), connect.NewRequest(&hubv1.GetLeaseRequest{Name: "db"}))
	if err != nil || got.Msg.GetLease().GetFencingToken() != l.Token {
		t.Fatalf("the lease after the restart: %v %v", got, err)
	}

	// Long: down for good; the loss comes before the lease, as the hub last confirmed it, ends.
	hub.kill()
	select {
	case <-l.Lost():
	case <-time.After(2 * ttl):
		t.Fatal("no loss signal")
	}
	lostAt := time.Now()
	var herr *kxmhub.Error
	if !errors.As(l.Err(), &herr) || herr.Code != "lease_unconfirmed" {
		t.Fatalf("loss: %v", l.Err())
	}
	if expires := l.Lease().GetExpiresAt().AsTime(); !lostAt.Before(expires) {
		t.Fatalf("lost at %v, after the lease's end %v", lostAt, expires)
	}
}

func TestLibraryInboxThroughSubscriberTooSlowAndARestart(t *testing.T) {
	dir := t.TempDir()
	port, dataPath := freePort(t), filepath.Join(dir, "kxm.db")
	hub := startHubProcess(t, port, dataPath, "KXM_STREAM_MAX_LAG=4")
	// HTTP/2 (h2c): its flow control holds the hub's writes to a reader that stops reading.
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: &protocols}}
	open := func(name string, opts ...connect.ClientOption) *kxmhub.Session {
		s, err := kxmhub.Connect(within(t), kxmhub.Options{URL: hub.url, Project: "p", Name: name, HeartbeatEvery: time.Hour, HTTPClient: h2c, ClientOptions: opts})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	subscribes := 0
	count := connect.WithInterceptors(streamCounter(&subscribes))
	sender, reader := open("sender"), open("reader", count)
	big := func(i int) string {
		b := make([]byte, 22_000) // random: the hub compresses frames, repeated text would fill no buffer
		_, _ = rand.Read(b)
		return fmt.Sprintf("message %03d %s", i, base64.StdEncoding.EncodeToString(b))
	}
	send := func(i int) {
		t.Helper()
		sendToReader(t, sender, big(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	next, stop := iter.Pull2(reader.Inbox(ctx, nil))
	defer stop()
	var seen []string
	take := func() error {
		ev, err, ok := next()
		if !ok || err != nil {
			return fmt.Errorf("inbox: %v %v", ok, err)
		}
		seen = append(seen, ev.Message.GetContent()[:11])
		return nil
	}
	read := func() {
		t.Helper()
		if err := take(); err != nil {
			t.Fatal(err)
		}
	}

	send(0)
	read()
	// The reader stops reading while 200 large messages (6 MB, past Go's 4 MB HTTP/2 stream
	// window) arrive: the hub cuts the stream off (subscriber_too_slow, lag 4) and the inbox
	// resumes where it says.
	for i := 1; i <= 200; i++ {
		send(i)
	}
	for i := 1; i <= 200; i++ {
		read()
	}
	if subscribes < 2 {
		t.Fatalf("the stream was never cut off (subscribes %d)", subscribes)
	}
	hub.kill()
	hub = startHubProcess(t, port, dataPath, "KXM_STREAM_MAX_LAG=4")
	before := subscribes
	// The restarted hub has every agent offline until it calls: the inbox reconnecting (while it
	// is being read) brings the reader back online.
	first := make(chan error, 1)
	go func() { first <- take() }()
	for i := 201; i <= 205; i++ {
		send(i)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i := 202; i <= 205; i++ {
		read()
	}
	if subscribes <= before {
		t.Fatal("the inbox did not reconnect after the restart")
	}
	var want []string
	for i := 0; i <= 205; i++ {
		want = append(want, fmt.Sprintf("message %03d", i))
	}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("inbox lost or repeated messages:\n got %v\nwant %v", seen, want)
	}
}

func streamCounter(n *int) connect.Interceptor {
	return counter{n}
}

type counter struct{ n *int }

func (c counter) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }
func (c counter) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		*c.n++
		return next(ctx, spec)
	}
}
func (c counter) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// After a restart the inbox resumes where its stream stood, not after the last message it
// yielded: a message cancelled before the inbox opened (which the default start skips) does not
// come back. The stream's keep-alive at the head, after the default start's replay, carries the
// cursor to resume from.
func TestLibraryInboxResumesWhereTheStreamStoodNotFromItsLastMessage(t *testing.T) {
	dir := t.TempDir()
	port, dataPath := freePort(t), filepath.Join(dir, "kxm.db")
	hub := startHubProcess(t, port, dataPath)
	open := func(name string) *kxmhub.Session {
		s, err := kxmhub.Connect(within(t), kxmhub.Options{URL: hub.url, Project: "p", Name: name, HeartbeatEvery: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sender, reader := open("sender"), open("reader")
	sendToReader(t, sender, "m1 pending")
	m2 := sendToReader(t, sender, "m2 cancelled before the inbox opened")
	if _, err := sender.Peer.CancelMessage(within(t), connect.NewRequest(&hubv1.CancelMessageRequest{MessageId: m2.GetId()})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	next, stop := iter.Pull2(reader.Inbox(ctx, nil))
	defer stop()
	take := func() (string, error) {
		ev, err, ok := next()
		if !ok || err != nil {
			return "", fmt.Errorf("inbox: %v %v", ok, err)
		}
		return ev.Message.GetContent(), nil
	}
	first, err := take()
	if err != nil {
		t.Fatal(err)
	}
	seen := []string{first}
	// The hub restarts; the inbox reconnects and reads on.
	hub.kill()
	hub = startHubProcess(t, port, dataPath)
	type taken struct {
		text string
		err  error
	}
	got := make(chan taken, 1)
	go func() {
		text, err := take()
		got <- taken{text, err}
	}()
	sendToReader(t, sender, "m3 live after the reconnect")
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	seen = append(seen, r.text)
	if strings.Join(seen, "|") != "m1 pending|m3 live after the reconnect" {
		t.Fatalf("the inbox yielded %q", seen)
	}
}
