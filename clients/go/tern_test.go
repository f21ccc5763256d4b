package tern

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// node is a real `tern dev` (TERN_BIN, which scripts/test.sh sets) on a free
// loopback port; restart kills it (SIGKILL) and starts it again on the same
// port and data directory.
type node struct {
	t       *testing.T
	bin     string
	dataDir string
	url     string
	port    int
	extra   []string
	cmd     *exec.Cmd
}

func startNode(t *testing.T, extra ...string) *node {
	bin := os.Getenv("TERN_BIN")
	if bin == "" {
		t.Fatal("TERN_BIN must name the tern binary (scripts/test.sh sets it)")
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := listener.Addr().(*net.TCPAddr).Port
	listener.Close()
	n := &node{t: t, bin: bin, dataDir: filepath.Join(t.TempDir(), "data"), port: port, url: fmt.Sprintf("http://127.0.0.1:%d", port), extra: extra}
	n.start()
	t.Cleanup(n.kill)
	return n
}

func (n *node) start() {
	args := append([]string{"dev", "--listen", fmt.Sprintf("127.0.0.1:%d", n.port), "--data-dir", n.dataDir}, n.extra...)
	n.cmd = exec.Command(n.bin, args...)
	n.cmd.Env = append(os.Environ(), "TERN_LOG_LEVEL=warn")
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if response, err := http.Get(n.url + "/readyz"); err == nil {
			response.Body.Close()
			if response.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.t.Fatal("tern dev did not become ready")
}

func (n *node) kill() {
	if n.cmd != nil && n.cmd.Process != nil {
		n.cmd.Process.Kill()
		n.cmd.Wait()
		n.cmd = nil
	}
}

func (n *node) restart() {
	n.kill()
	n.start()
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func TestRecordsConditionsAndPositions(t *testing.T) {
	n := startNode(t)
	c, bg := New(n.url), ctx(t)
	written, err := c.Put(bg, "svc/api", "config", map[string]int{"replicas": 3}, WriteOptions{Wait: true})
	if err != nil || written.Version == nil || !strings.HasPrefix(written.Position, "default:") {
		t.Fatalf("put: %+v %v", written, err)
	}
	record, err := c.Get(bg, "svc/api", "config", ReadOptions{After: written.Position})
	var value struct{ Replicas int }
	if err != nil || record == nil || record.Decode(&value) != nil || value.Replicas != 3 || record.Version != *written.Version {
		t.Fatalf("get: %+v %v", record, err)
	}
	if missing, err := c.Get(bg, "svc/api", "nothing", ReadOptions{Strong: true}); missing != nil || err != nil {
		t.Fatalf("a missing record is nil: %+v %v", missing, err)
	}
	wrong := *written.Version + 100
	_, err = c.Put(bg, "svc/api", "config", 4, WriteOptions{IfVersion: &wrong})
	var tern *Error
	if !errors.Is(err, ErrConditionFailed) || !errors.As(err, &tern) || tern.Code != "condition_failed" {
		t.Fatalf("a failed condition: %v", err)
	}
	if _, err := c.Put(bg, "svc/api", "config", 1, WriteOptions{IfAbsent: true}); !errors.Is(err, ErrConditionFailed) {
		t.Fatalf("if_absent on an existing record: %v", err)
	}
	deleted, err := c.Delete(bg, "svc/api", "config", WriteOptions{Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if gone, err := c.Get(bg, "svc/api", "config", ReadOptions{After: deleted.Position}); gone != nil || err != nil {
		t.Fatalf("deleted: %+v %v", gone, err)
	}
	// Keys with every kind of byte a path carries; "." and ".." would be dropped by URL normalization.
	for _, key := range []Key{{"a/b?c#d", "é 𝄞 %2F"}, {"v1", "kv"}, {"dots", "."}, {"dots", ".."}} {
		if _, err := c.Put(bg, key.PK, key.SK, []string{key.PK, key.SK}, WriteOptions{Wait: true}); err != nil {
			t.Fatalf("%v: %v", key, err)
		}
		got, err := c.Get(bg, key.PK, key.SK, ReadOptions{})
		var pair []string
		if err != nil || got == nil || got.Decode(&pair) != nil || pair[0] != key.PK || pair[1] != key.SK {
			t.Fatalf("%v read back as %+v %v", key, got, err)
		}
	}
	if empty, _ := c.Get(bg, "dots", "", ReadOptions{}); empty != nil {
		t.Fatalf("a dot key landed on another record: %+v", empty)
	}
	if _, err := c.Put(bg, "..", "x", 1, WriteOptions{}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("a pk starting with a dot is Tern's own: %v", err)
	}
}

func TestListsScansMultiGetsBatchesAndNamespaces(t *testing.T) {
	n := startNode(t)
	c, bg := New(n.url), ctx(t)
	if _, err := c.Put(bg, "other", "x", true, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	var last WriteResult
	for i := 0; i < 25; i++ {
		var err error
		if last, err = c.Put(bg, "users", fmt.Sprintf("u%02d", i), i, WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	page, err := c.List(bg, "users", ListOptions{Limit: 10, After: last.Position})
	if err != nil || len(page.Items) != 10 || page.NextCursor == nil || page.Items[0].SK != "u00" {
		t.Fatalf("a page: %+v %v", page, err)
	}
	next, err := c.List(bg, "users", ListOptions{Limit: 10, Cursor: *page.NextCursor})
	if err != nil || next.Items[0].SK != "u10" {
		t.Fatalf("the next page: %+v %v", next, err)
	}
	var scanned []string
	if err := c.ScanAll(bg, ListOptions{Limit: 4, After: last.Position}, func(r Record) bool { scanned = append(scanned, r.PK+"/"+r.SK); return true }); err != nil {
		t.Fatal(err)
	}
	if len(scanned) != 26 || scanned[0] != "other/x" || scanned[1] != "users/u00" {
		t.Fatalf("scanned %v", scanned)
	}
	many, err := c.GetMany(bg, []Key{{"users", "u03"}, {"nope", ""}})
	if err != nil || len(many) != 2 || many[0] == nil || many[1] != nil {
		t.Fatalf("get many: %+v %v", many, err)
	}
	result, err := c.Batch(bg, []Op{{Op: "put", PK: "cart", SK: "a", Value: 1}, {Op: "put", PK: "cart", SK: "b", Value: 2}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if cart, err := c.List(bg, "cart", ListOptions{After: result.Position}); err != nil || len(cart.Items) != 2 {
		t.Fatalf("the batch: %+v %v", cart, err)
	}
	if _, err := c.Batch(bg, []Op{{Op: "put", PK: "cart", SK: "c", Value: 3}, {Op: "put", PK: "cart", SK: "a", Value: 9, IfAbsent: true}}, ""); !errors.Is(err, ErrConditionFailed) {
		t.Fatalf("a failed batch: %v", err)
	}
	if created, err := c.CreateNamespace(bg, "dns", 8); !created || err != nil {
		t.Fatalf("create: %v %v", created, err)
	}
	if created, err := c.CreateNamespace(bg, "dns", 8); created || err != nil {
		t.Fatalf("create again: %v %v", created, err)
	}
	if _, err := c.CreateNamespace(bg, "dns", 4); !errors.Is(err, ErrConditionFailed) {
		t.Fatalf("another partition count: %v", err)
	}
	other := New(n.url)
	other.NS = "nope"
	if _, err := other.Get(bg, "k", "", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an unknown namespace: %v", err)
	}
	if err := c.DeleteNamespace(bg, "dns", "DNS"); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("delete unconfirmed: %v", err)
	}
	if err := c.DeleteNamespace(bg, "dns", "dns"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := c.DeleteNamespace(bg, "dns", "dns"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete again: %v", err)
	}
}

func TestTokensAndUnreachableNodes(t *testing.T) {
	n := startNode(t, "--auth")
	bg := ctx(t)
	token, err := os.ReadFile(filepath.Join(n.dataDir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	anonymous := New(n.url)
	if _, err := anonymous.Get(bg, "k", "", ReadOptions{}); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("no token: %v", err)
	}
	root := New(n.url)
	root.Token = strings.TrimSpace(string(token))
	var minted struct{ Token string }
	if err := root.call(bg, "POST", "/v1/tokens", nil, map[string]any{"ns": "default", "prefix": "public/", "verbs": []string{"read"}}, nil, &minted); err != nil {
		t.Fatal(err)
	}
	reader := New(n.url)
	reader.Token = minted.Token
	if _, err := reader.Get(bg, "k", "", ReadOptions{}); !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("outside the grant: %v", err)
	}
	n.kill()
	if _, err := root.Get(bg, "k", "", ReadOptions{}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("a node that is gone: %v", err)
	}
}

func TestAWatchResumesAcrossACrashAndMissesAndRepeatsNothing(t *testing.T) {
	n := startNode(t)
	c, bg := New(n.url), ctx(t)
	if _, err := c.Put(bg, "flags", "a", 0, WriteOptions{Wait: true}); err != nil {
		t.Fatal(err)
	}
	watch := c.Watch(bg, WatchOptions{PK: "flags", BackoffInitial: 200 * time.Millisecond, BackoffMax: time.Second})
	defer watch.Close()
	var seen []string
	kinds := map[string]int{}
	synced := false
	for event := range watch.Events() {
		kinds[event.Type]++
		if event.Type == "synced" && !synced {
			synced = true
			if _, ok := watch.View()[Key{"flags", "a"}]; !ok {
				t.Fatalf("the snapshot holds the record: %v", watch.View())
			}
			for i := 0; i < 5; i++ {
				if _, err := c.Put(bg, "flags", fmt.Sprintf("k%d", i), i, WriteOptions{Wait: true}); err != nil {
					t.Fatal(err)
				}
			}
			n.restart()
			after := New(n.url)
			for i := 5; i < 10; i++ {
				if _, err := after.Put(bg, "flags", fmt.Sprintf("k%d", i), i, WriteOptions{Wait: true}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if event.Type == "put" && synced {
			seen = append(seen, event.Record.SK+"="+string(event.Record.Value))
			if len(seen) == 10 {
				watch.Close()
			}
		}
	}
	want := []string{}
	for i := 0; i < 10; i++ {
		want = append(want, fmt.Sprintf("k%d=%d", i, i))
	}
	if strings.Join(seen, ",") != strings.Join(want, ",") {
		t.Fatalf("every change once, in order: %v", seen)
	}
	if kinds["disconnected"] < 1 || kinds["connected"] < 2 {
		t.Fatalf("it reconnected: %v", kinds)
	}
	if watch.Err() != nil {
		t.Fatalf("closed, not failed: %v", watch.Err())
	}
}

func TestAWatchOfAnUnknownNamespaceFails(t *testing.T) {
	n := startNode(t)
	c := New(n.url)
	c.NS = "nope"
	watch := c.Watch(ctx(t), WatchOptions{})
	for range watch.Events() {
	}
	if !errors.Is(watch.Err(), ErrNotFound) {
		t.Fatalf("a 404 ends the watch: %v", watch.Err())
	}
}

// A context that ends is the answer's error (context.Canceled or
// context.DeadlineExceeded), at once, not "unreachable" (which blames the
// node); a watch whose context ends closes its events and did not fail.
// Before the fix, both calls said ErrUnreachable.
func TestAnEndedContextIsTheErrorNotTheNode(t *testing.T) {
	// A node that takes connections and never answers.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
		}
	}()
	c := New("http://" + silent.Addr().String())
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Get(cancelled, "k", "", ReadOptions{}); !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnreachable) {
		t.Fatalf("a cancelled context: %v", err)
	}
	short, stop := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer stop()
	began := time.Now()
	if _, err := c.Put(short, "k", "", 1, WriteOptions{}); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnreachable) {
		t.Fatalf("a context past its deadline: %v", err)
	}
	if waited := time.Since(began); waited > 10*time.Second {
		t.Fatalf("the deadline was not kept: %v", waited)
	}

	n := startNode(t)
	watched, end := context.WithCancel(ctx(t))
	defer end()
	watch := New(n.url).Watch(watched, WatchOptions{})
	for event := range watch.Events() {
		if event.Type == "synced" {
			end()
		}
	}
	if watch.Err() != nil {
		t.Fatalf("ended by its context, not failed: %v", watch.Err())
	}
}
