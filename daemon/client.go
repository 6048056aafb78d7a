package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client talks to a daemon's control API ("stampede get --daemon").
type Client struct {
	// Addr is the API's address: a unix socket path or HOST:PORT.
	Addr string
	// Token is the bearer token of a TCP API.
	Token string
	hc    *http.Client
	base  string
}

// NewClient returns a client of the API at addr (a unix socket path, or
// HOST:PORT with token).
func NewClient(addr, token string) *Client {
	c := &Client{Addr: addr, Token: token}
	if !IsTCP(addr) {
		d := net.Dialer{Timeout: 5 * time.Second}
		c.hc = &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialContext(ctx, "unix", addr) },
		}}
		c.base = "http://stampede-daemon"
	} else {
		c.hc = &http.Client{Transport: &http.Transport{Proxy: nil}}
		c.base = "http://" + addr
	}
	return c
}

// APIError is an error answer of the API.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string { return fmt.Sprintf("daemon: %s (HTTP %d)", e.Message, e.Status) }

// do sends a request with body in (JSON, or none) and decodes the answer
// into out.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("daemon: no answer at %s (is 'stampede daemon' running?): %w", c.Addr, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(data))
		}
		return &APIError{Status: resp.StatusCode, Message: e.Error}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("daemon: bad answer: %w", err)
	}
	return nil
}

// Download adds a download of rawURL to path ("" : the daemon's default
// directory).
func (c *Client) Download(ctx context.Context, rawURL, path string) (Job, error) {
	var j Job
	err := c.do(ctx, http.MethodPost, "/v1/downloads", DownloadRequest{URL: rawURL, Path: path}, &j)
	return j, err
}

// Seed adds a seed of the local file path.
func (c *Client) Seed(ctx context.Context, req SeedRequest) (Job, error) {
	var j Job
	err := c.do(ctx, http.MethodPost, "/v1/seeds", req, &j)
	return j, err
}

// Job returns one job.
func (c *Client) Job(ctx context.Context, id string) (Job, error) {
	var j Job
	err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id), nil, &j)
	return j, err
}

// Jobs lists the jobs.
func (c *Client) Jobs(ctx context.Context) ([]Job, error) {
	var l JobList
	err := c.do(ctx, http.MethodGet, "/v1/jobs", nil, &l)
	return l.Jobs, err
}

// Pause and Resume stop and restart a job.
func (c *Client) Pause(ctx context.Context, id string) (Job, error) {
	var j Job
	err := c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/pause", nil, &j)
	return j, err
}

func (c *Client) Resume(ctx context.Context, id string) (Job, error) {
	var j Job
	err := c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/resume", nil, &j)
	return j, err
}

// Remove forgets a job, deleting a download's data if asked.
func (c *Client) Remove(ctx context.Context, id string, deleteData bool) (RemoveResult, error) {
	var r RemoveResult
	err := c.do(ctx, http.MethodDelete, fmt.Sprintf("/v1/jobs/%s?delete_data=%t", url.PathEscape(id), deleteData), nil, &r)
	return r, err
}

// Stats returns the daemon's figures.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	err := c.do(ctx, http.MethodGet, "/v1/stats", nil, &s)
	return s, err
}
