// Package tern is a client for Tern's HTTP API (docs/api.md): records,
// lists, namespaces, and watches that reconnect and resume by position.
// Every call takes a context: its deadline and cancellation bound the call.
package tern

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// RequestTimeout bounds a call without a context deadline: far above the
// server's own waits (timeout_ms up to 60 s).
const RequestTimeout = 90 * time.Second

// AnswerBytesMax bounds an answer read into memory (a list page is at most
// 64 MiB by the server's page_bytes bound).
const AnswerBytesMax = 72 << 20

// Client talks to one Tern node (any node answers any request).
type Client struct {
	// URL of the node, e.g. http://127.0.0.1:7070.
	URL string
	// Token is sent as Authorization: Bearer when set.
	Token string
	// NS is the namespace calls use ("default" when empty).
	NS   string
	HTTP *http.Client
}

// New returns a client of the node at baseURL for namespace "default".
func New(baseURL string) *Client {
	return &Client{URL: strings.TrimRight(baseURL, "/"), NS: "default", HTTP: &http.Client{}}
}

// Record is a stored record; Version is the log offset of the write that
// wrote it, Position (reads only) the position the read saw.
type Record struct {
	PK       string          `json:"pk"`
	SK       string          `json:"sk"`
	Value    json.RawMessage `json:"value"`
	Version  uint64          `json:"version"`
	Position string          `json:"position,omitempty"`
}

// Decode unmarshals the record's value into v.
func (r *Record) Decode(v any) error { return json.Unmarshal(r.Value, v) }

// WriteResult: Position is just after the write (read your write with After).
type WriteResult struct {
	Position  string  `json:"position"`
	Version   *uint64 `json:"version,omitempty"`
	Duplicate bool    `json:"duplicate,omitempty"`
}

// Page is one page of a listing; NextCursor is empty on the last.
type Page struct {
	Items      []Record `json:"items"`
	NextCursor *string  `json:"next_cursor"`
	Position   string   `json:"position"`
}

// ReadOptions: After waits until a position is applied; Strong is a linearizable read.
type ReadOptions struct {
	After  string
	Strong bool
}

// WriteOptions: conditions, waiting for the write to apply here, and an idempotency key.
type WriteOptions struct {
	IfVersion      *uint64
	IfAbsent       bool
	Wait           bool
	IdempotencyKey string
}

// ListOptions for one pk's records (sort-key order) or, with Scan, the namespace's.
type ListOptions struct {
	Prefix, Start, End, Cursor, After string
	Limit                             int
	Reverse                           bool
	// Partition (Scan only): one partition's records.
	Partition *int
}

// Key names a record for GetMany.
type Key struct {
	PK string `json:"pk"`
	SK string `json:"sk"`
}

// Op is one operation of a Batch: "put" (with Value) or "delete".
type Op struct {
	Op        string  `json:"op"`
	PK        string  `json:"pk"`
	SK        string  `json:"sk"`
	Value     any     `json:"value,omitempty"`
	IfVersion *uint64 `json:"if_version,omitempty"`
	IfAbsent  bool    `json:"if_absent,omitempty"`
}

// segment is a key as one path segment: every byte but unreserved ones
// encoded; "." and ".." as %2E, which URL normalization would drop.
func segment(key string) string {
	if key == "." || key == ".." {
		return strings.ReplaceAll(key, ".", "%2E")
	}
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		if ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func (c *Client) ns() string {
	if c.NS == "" {
		return "default"
	}
	return c.NS
}

func (c *Client) recordPath(pk string, sk *string) string {
	path := "/v1/ns/" + segment(c.ns()) + "/kv/" + segment(pk)
	if sk != nil {
		path += "/" + segment(*sk)
	}
	return path
}

// do sends one request and returns the answer's status and body.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body []byte, headers map[string]string) (int, []byte, error) {
	// The caller's context: when it ends, its error is the answer
	// (errors.Is(err, context.Canceled) or context.DeadlineExceeded), not
	// "unreachable", which says the node is at fault.
	caller := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, RequestTimeout)
		defer cancel()
	}
	target := c.URL + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	request, err := http.NewRequestWithContext(ctx, method, target, reader)
	if err != nil {
		return 0, nil, err
	}
	// Send the path as built: %2F in keys must stay encoded.
	request.URL.RawPath = path
	if body != nil {
		request.Header.Set("content-type", "application/json")
	}
	if c.Token != "" {
		request.Header.Set("authorization", "Bearer "+c.Token)
	}
	for k, v := range headers {
		request.Header.Set(k, v)
	}
	response, err := c.http().Do(request)
	if err != nil {
		if caller.Err() != nil {
			return 0, nil, fmt.Errorf("tern: %s %s: %w", method, path, caller.Err())
		}
		return 0, nil, &Error{Code: "unreachable", Message: fmt.Sprintf("cannot reach %s: %v", c.URL, err)}
	}
	defer response.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(response.Body, AnswerBytesMax))
	if err != nil {
		if caller.Err() != nil {
			return 0, nil, fmt.Errorf("tern: reading the answer to %s %s: %w", method, path, caller.Err())
		}
		return 0, nil, &Error{Code: "unreachable", Message: fmt.Sprintf("reading the answer of %s: %v", c.URL, err)}
	}
	return response.StatusCode, answer, nil
}

func (c *Client) http() *http.Client {
	if c.HTTP == nil {
		return http.DefaultClient
	}
	return c.HTTP
}

// call sends a request and decodes a 2xx answer into out (an error answer is an *Error).
func (c *Client) call(ctx context.Context, method, path string, query url.Values, in any, headers map[string]string, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	status, answer, err := c.do(ctx, method, path, query, body, headers)
	if err != nil {
		return err
	}
	if status < 200 || status >= 300 {
		return errorFrom(status, answer)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(answer, out)
}

func readQuery(o ReadOptions) url.Values {
	q := url.Values{}
	if o.After != "" {
		q.Set("after", o.After)
	}
	if o.Strong {
		q.Set("consistency", "strong")
	}
	return q
}

// Get reads the record at (pk, sk); nil (and no error) when there is none.
func (c *Client) Get(ctx context.Context, pk, sk string, o ReadOptions) (*Record, error) {
	var record Record
	err := c.call(ctx, "GET", c.recordPath(pk, &sk), readQuery(o), nil, nil, &record)
	if e, ok := err.(*Error); ok && e.Code == "not_found" {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &record, nil
}

func writeQuery(o WriteOptions) (url.Values, map[string]string) {
	q := url.Values{}
	if o.IfVersion != nil {
		q.Set("if_version", strconv.FormatUint(*o.IfVersion, 10))
	}
	if o.IfAbsent {
		q.Set("if_absent", "true")
	}
	if o.Wait {
		q.Set("wait", "applied")
	}
	headers := map[string]string{}
	if o.IdempotencyKey != "" {
		headers["idempotency-key"] = o.IdempotencyKey
	}
	return q, headers
}

// Put writes value (anything encoding/json marshals) at (pk, sk).
// A condition that does not hold is an error matching ErrConditionFailed.
func (c *Client) Put(ctx context.Context, pk, sk string, value any, o WriteOptions) (WriteResult, error) {
	q, headers := writeQuery(o)
	var result WriteResult
	err := c.call(ctx, "PUT", c.recordPath(pk, &sk), q, value, headers, &result)
	return result, err
}

// Delete removes the record at (pk, sk).
func (c *Client) Delete(ctx context.Context, pk, sk string, o WriteOptions) (WriteResult, error) {
	q, headers := writeQuery(o)
	var result WriteResult
	err := c.call(ctx, "DELETE", c.recordPath(pk, &sk), q, nil, headers, &result)
	return result, err
}

func listQuery(o ListOptions) url.Values {
	q := url.Values{}
	for name, value := range map[string]string{"prefix": o.Prefix, "start": o.Start, "end": o.End, "cursor": o.Cursor, "after": o.After} {
		if value != "" {
			q.Set(name, value)
		}
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Reverse {
		q.Set("reverse", "true")
	}
	if o.Partition != nil {
		q.Set("partition", strconv.Itoa(*o.Partition))
	}
	return q
}

// List reads one page of pk's records in sort-key order (Cursor: the page after NextCursor).
func (c *Client) List(ctx context.Context, pk string, o ListOptions) (Page, error) {
	var page Page
	err := c.call(ctx, "GET", c.recordPath(pk, nil), listQuery(o), nil, nil, &page)
	return page, err
}

// Scan reads one page of the whole namespace in (pk, sk) order; Prefix is a pk prefix.
func (c *Client) Scan(ctx context.Context, o ListOptions) (Page, error) {
	var page Page
	err := c.call(ctx, "GET", "/v1/ns/"+segment(c.ns())+"/kv", listQuery(o), nil, nil, &page)
	return page, err
}

// ScanAll follows cursors and calls each for every record, in order, until it returns false or an error occurs.
func (c *Client) ScanAll(ctx context.Context, o ListOptions, each func(Record) bool) error {
	for {
		page, err := c.Scan(ctx, o)
		if err != nil {
			return err
		}
		for _, record := range page.Items {
			if !each(record) {
				return nil
			}
		}
		if page.NextCursor == nil {
			return nil
		}
		o.Cursor = *page.NextCursor
	}
}

// GetMany reads records in request order; nil where a record is missing.
func (c *Client) GetMany(ctx context.Context, keys []Key) ([]*Record, error) {
	var answer struct {
		Items    []*Record `json:"items"`
		Position string    `json:"position"`
	}
	err := c.call(ctx, "POST", "/v1/ns/"+segment(c.ns())+"/get", nil, map[string]any{"keys": keys}, nil, &answer)
	return answer.Items, err
}

// Batch applies ops of one partition, all or nothing.
func (c *Client) Batch(ctx context.Context, ops []Op, idempotencyKey string) (WriteResult, error) {
	headers := map[string]string{}
	if idempotencyKey != "" {
		headers["idempotency-key"] = idempotencyKey
	}
	var result WriteResult
	err := c.call(ctx, "POST", "/v1/ns/"+segment(c.ns())+"/batch", nil, map[string]any{"ops": ops}, headers, &result)
	return result, err
}

// CreateNamespace creates name (true) or finds it as asked (false); a
// namespace of another partition count is an error matching ErrConditionFailed.
func (c *Client) CreateNamespace(ctx context.Context, name string, partitions int) (bool, error) {
	var answer struct {
		Created bool `json:"created"`
	}
	err := c.call(ctx, "PUT", "/v1/ns/"+segment(name), nil, map[string]int{"partitions": partitions}, nil, &answer)
	return answer.Created, err
}

// DeleteNamespace deletes name for good, on every node: its records, log,
// stores and snapshots. confirm must repeat name (the server deletes
// nothing otherwise: ErrBadRequest). No such namespace: ErrNotFound.
func (c *Client) DeleteNamespace(ctx context.Context, name, confirm string) error {
	return c.call(ctx, "DELETE", "/v1/ns/"+segment(name), url.Values{"confirm": {confirm}}, nil, nil, nil)
}

// Namespaces lists the namespaces the token may see.
func (c *Client) Namespaces(ctx context.Context) ([]map[string]any, error) {
	var answer struct {
		Namespaces []map[string]any `json:"namespaces"`
	}
	err := c.call(ctx, "GET", "/v1/ns", nil, nil, nil, &answer)
	return answer.Namespaces, err
}
