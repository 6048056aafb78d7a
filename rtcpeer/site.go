package rtcpeer

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/pion/webrtc/v4"

	"github.com/stampede-dev/stampede/webpeer"
)

// maxSiteConfig bounds the peer.json read.
const maxSiteConfig = 64 << 10

// siteICE reads the ICE servers the site of the tracker at announce names
// to its browser peers (webpeer's peer.json, at the root of the
// tracker's host): stampede serve's STUN (--stun), and its TURN relay
// (--turn) with credentials made for this request. A native peer thus
// learns the same servers as the browsers, with nothing to configure. A
// site that serves no peer.json, or says the peer is off, names none.
func siteICE(ctx context.Context, client *http.Client, announce string) ([]webrtc.ICEServer, error) {
	u, err := url.Parse(announce)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("rtcpeer: announce URL %q: not http(s)", announce)
	}
	u = &url.URL{Scheme: u.Scheme, Host: u.Host, Path: webpeer.ConfigPath}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	res, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("rtcpeer: site ICE servers: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("rtcpeer: site ICE servers: %s answered %s", u, res.Status)
	}
	b, err := io.ReadAll(io.LimitReader(res.Body, maxSiteConfig))
	if err != nil {
		return nil, fmt.Errorf("rtcpeer: site ICE servers: %w", err)
	}
	return parseSiteICE(b)
}

// parseSiteICE reads peer.json's ice_servers: each a URL, or a server as
// WebRTC's RTCIceServer has it ({urls, username, credential}, urls one
// URL or a list).
func parseSiteICE(b []byte) ([]webrtc.ICEServer, error) {
	var doc struct {
		Enabled    bool              `json:"enabled"`
		ICEServers []json.RawMessage `json:"ice_servers"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("rtcpeer: peer.json: %w", err)
	}
	if !doc.Enabled {
		return nil, nil
	}
	var out []webrtc.ICEServer
	for _, raw := range doc.ICEServers {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			out = append(out, webrtc.ICEServer{URLs: []string{s}})
			continue
		}
		var srv struct {
			URLs       json.RawMessage `json:"urls"`
			Username   string          `json:"username"`
			Credential string          `json:"credential"`
		}
		if err := json.Unmarshal(raw, &srv); err != nil {
			return nil, fmt.Errorf("rtcpeer: peer.json: an ICE server: %w", err)
		}
		var urls []string
		if json.Unmarshal(srv.URLs, &s) == nil {
			urls = []string{s}
		} else if err := json.Unmarshal(srv.URLs, &urls); err != nil {
			return nil, fmt.Errorf("rtcpeer: peer.json: an ICE server's urls: %w", err)
		}
		is := webrtc.ICEServer{URLs: urls}
		if srv.Username != "" || srv.Credential != "" {
			is.Username, is.Credential = srv.Username, srv.Credential
		}
		out = append(out, is)
	}
	return out, nil
}
