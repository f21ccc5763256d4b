package tern

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// WatchOptions choose what a watch follows and where it starts.
type WatchOptions struct {
	// PK watches one pk (empty: the whole namespace); Prefix and SK narrow it.
	PK, Prefix, SK string
	// From: "snapshot" (default: the state first), "now", or a position.
	From string
	// Mode: "state" (default) or "log".
	Mode string
	// Backoff between reconnects: the first, doubling to the cap, jittered (defaults 1 s and 30 s).
	BackoffInitial, BackoffMax time.Duration
	// Buffer is how many events wait for a slow reader before the stream pauses (default 1,024).
	Buffer int
}

// Event is one watch event. Type is "put" or "delete" (Record set),
// "snapshot" or "reset" (the state follows as puts, then "synced"),
// "synced", "progress", "cancel" (the server ended the stream: the watch
// resumes), or the watch's own "connected" and "disconnected".
type Event struct {
	Type     string
	Record   *Record
	Position string
	Reason   string
}

// WatchIdle: a watch that reads nothing for this long is taken as dead and
// reconnects (the server sends a keep-alive well within it).
const WatchIdle = 90 * time.Second

// LineBytesMax bounds one line of the event stream (a record's event is at
// most its value plus its keys).
const LineBytesMax = 16 << 20

// Watch is a subscription that never gives up: it reconnects with jittered
// backoff and resumes from the last position it received
// (Last-Event-ID), so it misses and repeats nothing. Read Events until it
// is closed: by the context, by Close, or by an answer the node rejects
// (4xx, then Err says why).
type Watch struct {
	events chan Event
	cancel context.CancelFunc

	mu       sync.Mutex
	err      error
	position string
	view     map[Key]Record
	pending  map[Key]Record
}

// Watch starts a watch of the client's namespace; it runs until ctx ends or Close.
func (c *Client) Watch(ctx context.Context, o WatchOptions) *Watch {
	if o.From == "" {
		o.From = "snapshot"
	}
	if o.BackoffInitial <= 0 {
		o.BackoffInitial = time.Second
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = 30 * time.Second
	}
	if o.Buffer <= 0 {
		o.Buffer = 1024
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &Watch{events: make(chan Event, o.Buffer), cancel: cancel, view: map[Key]Record{}}
	go w.run(ctx, c, o)
	return w
}

// Events delivers the watch's events in order; it is closed when the watch ends.
func (w *Watch) Events() <-chan Event { return w.events }

// Close ends the watch.
func (w *Watch) Close() { w.cancel() }

// Err is why the watch ended on its own (nil while it runs, or when closed).
func (w *Watch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Position is the last position received: where a reconnect resumes.
func (w *Watch) Position() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.position
}

// View is a copy of the watched records as of Position.
func (w *Watch) View() map[Key]Record {
	w.mu.Lock()
	defer w.mu.Unlock()
	view := make(map[Key]Record, len(w.view))
	for k, v := range w.view {
		view[k] = v
	}
	return view
}

func (w *Watch) apply(e Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch e.Type {
	case "put", "delete":
		key := Key{e.Record.PK, e.Record.SK}
		target := w.view
		if w.pending != nil {
			target = w.pending
		}
		if e.Type == "put" {
			target[key] = *e.Record
		} else {
			delete(target, key)
		}
		if e.Position != "" {
			w.position = e.Position
		}
	case "snapshot", "reset":
		w.pending = map[Key]Record{}
	case "synced", "progress", "cancel":
		if e.Type == "synced" && w.pending != nil {
			w.view, w.pending = w.pending, nil
		}
		if e.Position != "" {
			w.position = e.Position
		}
	}
}

// send hands e to the reader; false when the watch is closing.
func (w *Watch) send(ctx context.Context, e Event) bool {
	select {
	case w.events <- e:
		return true
	case <-ctx.Done():
		return false
	}
}

func (w *Watch) run(ctx context.Context, c *Client, o WatchOptions) {
	defer close(w.events)
	attempt := 0
	for ctx.Err() == nil {
		atOnce, err := w.connect(ctx, c, o, &attempt)
		if rejected, ok := err.(*Error); ok && rejected.Status >= 400 && rejected.Status < 500 {
			w.mu.Lock()
			w.err = rejected
			w.mu.Unlock()
			return
		}
		if ctx.Err() != nil {
			return
		}
		delay := time.Duration(0)
		if !atOnce {
			shift := attempt
			if shift > 30 {
				shift = 30
			}
			ceiling := o.BackoffInitial << shift
			if ceiling > o.BackoffMax || ceiling <= 0 {
				ceiling = o.BackoffMax
			}
			delay = ceiling/2 + time.Duration(rand.Int63n(int64(ceiling/2)+1))
		}
		attempt++
		if !w.send(ctx, Event{Type: "disconnected", Reason: fmt.Sprint(err)}) {
			return
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return
		}
	}
}

// connect runs one connection until it ends; atOnce when the server cut a
// slow reader (it resumes without a pause).
func (w *Watch) connect(ctx context.Context, c *Client, o WatchOptions, attempt *int) (atOnce bool, err error) {
	q := url.Values{}
	for name, value := range map[string]string{"pk": o.PK, "prefix": o.Prefix, "sk": o.SK, "mode": o.Mode} {
		if value != "" {
			q.Set(name, value)
		}
	}
	position := w.Position()
	if position == "" {
		q.Set("from", o.From)
	}
	path := "/v1/ns/" + segment(c.ns()) + "/watch"
	// The connection's own context: cancelled when it idles past WatchIdle.
	connection, hangUp := context.WithCancel(ctx)
	defer hangUp()
	idle := time.AfterFunc(WatchIdle, hangUp)
	defer idle.Stop()
	request, err := http.NewRequestWithContext(connection, "GET", c.URL+path+"?"+q.Encode(), nil)
	if err != nil {
		return false, err
	}
	request.Header.Set("accept", "text/event-stream")
	if position != "" {
		request.Header.Set("last-event-id", position)
	}
	if c.Token != "" {
		request.Header.Set("authorization", "Bearer "+c.Token)
	}
	response, err := c.http().Do(request)
	if err != nil {
		return false, &Error{Code: "unreachable", Message: err.Error()}
	}
	defer response.Body.Close()
	if response.StatusCode >= 300 {
		body, _ := io.ReadAll(io.LimitReader(response.Body, 1<<20))
		return false, errorFrom(response.StatusCode, body)
	}
	if !w.send(ctx, Event{Type: "connected"}) {
		return false, ctx.Err()
	}
	scanner := bufio.NewScanner(response.Body)
	scanner.Buffer(make([]byte, 64<<10), LineBytesMax)
	kind, id, data := "message", "", []string{}
	for scanner.Scan() {
		idle.Reset(WatchIdle)
		line := scanner.Text()
		if line != "" {
			if strings.HasPrefix(line, ":") {
				continue
			}
			name, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch name {
			case "event":
				kind = value
			case "id":
				id = value
			case "data":
				data = append(data, value)
			}
			continue
		}
		if len(data) == 0 {
			kind, id = "message", ""
			continue
		}
		event, ok := eventOf(kind, id, strings.Join(data, "\n"))
		kind, id, data = "message", "", data[:0]
		if !ok {
			continue
		}
		*attempt = 0
		w.apply(event)
		if !w.send(ctx, event) {
			return false, ctx.Err()
		}
		if event.Type == "cancel" {
			return event.Reason == "slow_consumer", &Error{Code: event.Reason, Message: "the server ended the subscription"}
		}
	}
	if err := scanner.Err(); err != nil {
		return false, &Error{Code: "unreachable", Message: err.Error()}
	}
	return false, &Error{Code: "stream_ended", Message: "the subscription stream ended"}
}

// eventOf reads one SSE message; false for one this client does not know.
func eventOf(kind, id, data string) (Event, bool) {
	var fields struct {
		PK       string          `json:"pk"`
		SK       string          `json:"sk"`
		Value    json.RawMessage `json:"value"`
		Version  uint64          `json:"version"`
		Position string          `json:"position"`
		Reason   string          `json:"reason"`
	}
	if json.Unmarshal([]byte(data), &fields) != nil {
		return Event{}, false
	}
	switch kind {
	case "put", "delete":
		record := &Record{PK: fields.PK, SK: fields.SK, Value: fields.Value, Version: fields.Version, Position: id}
		return Event{Type: kind, Record: record, Position: id}, true
	case "snapshot", "reset", "synced", "progress", "cancel":
		return Event{Type: kind, Position: fields.Position, Reason: fields.Reason}, true
	}
	return Event{}, false
}
