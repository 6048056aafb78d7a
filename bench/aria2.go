package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"
)

// The BitTorrent baseline, as ../shared/BENCHMARKS.md describes it: a .torrent
// made with mktorrent, opentracker as the tracker and an aria2c seeder on
// the origin host (capped at the origin's upload), aria2c leechers with the
// peers' caps, DHT and local peer discovery off, peer exchange on.

type aria2Sys struct {
	env     *runEnv
	dir     string // torrent, tracker config, whitelist (readable by nobody)
	torrent string
	hash    string // info-hash, hex
	// The torrent's pieces: 2^pieceLog = pieceSz bytes.
	pieceLog int
	pieceSz  int64

	trackerPort, seedPort, rpcPort int
	secret                         string

	tracker, seeder *proc
}

func newAria2(e *runEnv) (*aria2Sys, error) {
	if m := missingPrograms(exec.LookPath, aria2Programs); len(m) > 0 {
		return nil, &Unavailable{Scenario: e.sc.Name, System: SysAria2, Backend: e.sc.Backend, Missing: m}
	}
	var tok [12]byte
	_, _ = rand.Read(tok[:])
	// About 256 pieces, within mktorrent's 32 KiB to 4 MiB.
	lg := min(max(bits.Len64(uint64(e.sc.Size/256))-1, 15), 22)
	return &aria2Sys{env: e, dir: filepath.Join(e.dir, "aria2"), secret: hex.EncodeToString(tok[:]), pieceLog: lg, pieceSz: 1 << lg}, nil
}

func (a *aria2Sys) name() string  { return SysAria2 }
func (a *aria2Sys) label() string { return "BitTorrent (aria2c)" }
func (a *aria2Sys) notes() []string {
	return []string{fmt.Sprintf("BitTorrent: mktorrent pieces of %s, opentracker, one aria2c seeder on the origin host "+
		"(its upload is the origin's bytes), aria2c leechers (DHT and LPD off, PEX on); "+
		"leechers' progress comes from aria2c's one-second summaries (0.1 MiB resolution).", fmtSize(a.pieceSz))}
}

// prepare makes the torrent and picks the ports once for all runs, so the
// announce URL in the torrent stays right.
func (a *aria2Sys) prepare(ctx context.Context) error {
	if a.torrent != "" {
		return nil
	}
	e := a.env
	if err := os.MkdirAll(a.dir, 0o755); err != nil {
		return err
	}
	// opentracker drops to nobody and chroots into its directory.
	if err := os.Chmod(a.dir, 0o755); err != nil {
		return err
	}
	var err error
	for _, p := range []*int{&a.trackerPort, &a.seedPort, &a.rpcPort} {
		if *p, err = e.origin.FreePort(); err != nil {
			return fmt.Errorf("aria2: picking a port: %w", err)
		}
	}
	a.torrent = filepath.Join(a.dir, "file.torrent")
	announce := "http://" + e.origin.Addr(a.trackerPort) + "/announce"
	if _, err := runTool(ctx, "mktorrent", "-l", strconv.Itoa(a.pieceLog), "-a", announce, "-o", a.torrent,
		filepath.Join(e.www, e.file)); err != nil {
		return err
	}
	data, err := os.ReadFile(a.torrent)
	if err != nil {
		return err
	}
	if a.hash, err = infoHash(data); err != nil {
		return fmt.Errorf("%s: %w", a.torrent, err)
	}
	if err := os.WriteFile(filepath.Join(a.dir, "whitelist"), []byte(a.hash+"\n"), 0o644); err != nil {
		return err
	}
	conf := fmt.Sprintf("listen.tcp_udp %s\naccess.whitelist whitelist\ntracker.rootdir %s\n",
		e.origin.Addr(a.trackerPort), a.dir)
	if os.Geteuid() == 0 {
		conf += "tracker.user nobody\n" // Debian's opentracker refuses to run as root
	}
	return os.WriteFile(filepath.Join(a.dir, "opentracker.conf"), []byte(conf), 0o644)
}

func (a *aria2Sys) common() []string {
	return []string{"--enable-dht=false", "--enable-dht6=false", "--bt-enable-lpd=false", "--enable-peer-exchange=true",
		"--disable-ipv6=true", "--console-log-level=warn", "--summary-interval=1", "--file-allocation=none",
		"--allow-overwrite=true", "--auto-file-renaming=false", "--bt-tracker-interval=5",
		"--bt-tracker-connect-timeout=5", "--bt-tracker-timeout=5"}
}

func (a *aria2Sys) start(ctx context.Context) error {
	if err := a.prepare(ctx); err != nil {
		return err
	}
	if err := a.startTracker(ctx); err != nil {
		return err
	}
	return a.startSeeder(ctx)
}

func (a *aria2Sys) startTracker(ctx context.Context) error {
	e := a.env
	p, err := startProc(procSpec{name: "opentracker", dir: a.dir,
		argv: e.origin.Command("opentracker", "-f", filepath.Join(a.dir, "opentracker.conf"))})
	if err != nil {
		return err
	}
	a.tracker = p
	// Ready once it accepts connections.
	deadline := time.Now().Add(10 * time.Second)
	for {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := e.origin.DialContext(dctx, "tcp", e.origin.Addr(a.trackerPort))
		cancel()
		if err == nil {
			c.Close()
			return nil
		}
		if p.exited() {
			return fmt.Errorf("opentracker did not start: %s", p.describe())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.kill()
			return fmt.Errorf("opentracker not listening after 10s: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (a *aria2Sys) startSeeder(ctx context.Context) error {
	e := a.env
	argv := append([]string{"aria2c"}, a.common()...)
	argv = append(argv, "--check-integrity=true", "--seed-ratio=0.0", "-d", e.www,
		"--listen-port="+strconv.Itoa(a.seedPort), "--enable-rpc=true", "--rpc-listen-all=false",
		"--rpc-listen-port="+strconv.Itoa(a.rpcPort), "--rpc-secret="+a.secret, "--summary-interval=0")
	if e.shaping() && e.sc.OriginUp > 0 {
		argv = append(argv, "--max-upload-limit="+strconv.FormatInt(e.sc.OriginUp, 10))
	}
	argv = append(argv, a.torrent)
	p, err := startProc(procSpec{name: "aria2c seeder", argv: e.origin.Command(argv...), stdout: func(string, time.Time) {}})
	if err != nil {
		return err
	}
	a.seeder = p
	// Ready once it has checked the file and seeds it.
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := a.rpcStatus(ctx)
		if err == nil && len(st) == 1 && st[0].Seeder == "true" {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("aria2c seeder did not start: %s", p.describe())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.kill()
			return fmt.Errorf("aria2c seeder not seeding after 60s (last: %v %v)", st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type aria2Status struct {
	Status          string `json:"status"`
	Seeder          string `json:"seeder"`
	UploadLength    string `json:"uploadLength"`
	CompletedLength string `json:"completedLength"`
}

// rpcStatus asks the seeder for its active downloads over JSON-RPC; the RPC
// port listens on the origin host's loopback.
func (a *aria2Sys) rpcStatus(ctx context.Context) ([]aria2Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "bench", "method": "aria2.tellActive",
		"params": []any{"token:" + a.secret, []string{"status", "seeder", "uploadLength", "completedLength"}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		"http://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(a.rpcPort))+"/jsonrpc", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := a.env.origin.HTTPClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Result []aria2Status `json:"result"`
		Error  *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	if r.Error != nil {
		return nil, errors.New("aria2 rpc: " + r.Error.Message)
	}
	return r.Result, nil
}

// originBytes is what the seeder has uploaded.
func (a *aria2Sys) originBytes(ctx context.Context) (int64, error) {
	st, err := a.rpcStatus(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, s := range st {
		v, err := strconv.ParseInt(s.UploadLength, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("aria2 rpc: uploadLength %q", s.UploadLength)
		}
		n += v
	}
	return n, nil
}

func (a *aria2Sys) restartOrigin(ctx context.Context) error {
	a.seeder.kill()
	return a.startSeeder(ctx)
}

func (a *aria2Sys) restartTracker(ctx context.Context) error {
	a.tracker.kill()
	return a.startTracker(ctx)
}

func (a *aria2Sys) corruptible() string {
	return "corrupting aria2c's uploads would need a modified aria2c"
}

func (a *aria2Sys) stop() {
	for _, p := range []*proc{a.seeder, a.tracker} {
		if p != nil {
			p.term(3 * time.Second)
		}
	}
}

func (a *aria2Sys) peer(id int, h *Host, c Class, dir string) peerCmd {
	e := a.env
	port, err := h.FreePort()
	if err != nil {
		port = 20000 + id // the peer's own namespace, or a fallback on loopback
	}
	argv := append([]string{"aria2c"}, a.common()...)
	argv = append(argv, "-d", dir, "--listen-port="+strconv.Itoa(port),
		"--seed-time="+strconv.FormatFloat(e.sc.Departure.Linger.Minutes(), 'f', -1, 64))
	if e.shaping() {
		if c.Down > 0 {
			argv = append(argv, "--max-download-limit="+strconv.FormatInt(c.Down, 10))
		}
		if c.Up > 0 {
			argv = append(argv, "--max-upload-limit="+strconv.FormatInt(c.Up, 10))
		}
	}
	argv = append(argv, a.torrent)
	return peerCmd{argv: h.Command(argv...), output: filepath.Join(dir, e.file), progress: progressAria2}
}

// aria2Summary matches the progress part of aria2c's summary line:
// "[#2089b0 7.4MiB/32MiB(23%) CN:5 SD:1 DL:1.0MiB UL:256KiB ETA:24s]".
var aria2Summary = regexp.MustCompile(`^\[#\w+ (?:SEED\()?([\d.]+)(B|KiB|MiB|GiB)/([\d.]+)(B|KiB|MiB|GiB)`)

// parseAria2Progress reads the bytes done from a summary line.
func parseAria2Progress(line string) (done int64, ok bool) {
	m := aria2Summary.FindStringSubmatch(line)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, false
	}
	mul := map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m[2]]
	return int64(v * mul), true
}

// infoHash is the SHA-1 of the bencoded "info" dictionary of a .torrent.
func infoHash(torrent []byte) (string, error) {
	if len(torrent) == 0 || torrent[0] != 'd' {
		return "", errors.New("not a bencoded dictionary")
	}
	i := 1
	for i < len(torrent) && torrent[i] != 'e' {
		key, next, err := bencodeString(torrent, i)
		if err != nil {
			return "", err
		}
		end, err := bencodeSkip(torrent, next)
		if err != nil {
			return "", err
		}
		if key == "info" {
			if torrent[next] != 'd' {
				return "", errors.New("info is not a dictionary")
			}
			sum := sha1.Sum(torrent[next:end])
			return hex.EncodeToString(sum[:]), nil
		}
		i = end
	}
	return "", errors.New("no info dictionary")
}

// bencodeString reads the string at b[i:] and returns it with the index
// after it.
func bencodeString(b []byte, i int) (string, int, error) {
	colon := bytes.IndexByte(b[i:], ':')
	if colon < 1 {
		return "", 0, fmt.Errorf("bencode: bad string at %d", i)
	}
	n, err := strconv.Atoi(string(b[i : i+colon]))
	start := i + colon + 1
	if err != nil || n < 0 || start+n > len(b) {
		return "", 0, fmt.Errorf("bencode: bad string length at %d", i)
	}
	return string(b[start : start+n]), start + n, nil
}

// bencodeSkip returns the index after the value at b[i:].
func bencodeSkip(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errors.New("bencode: truncated")
	}
	switch c := b[i]; {
	case c == 'i':
		e := bytes.IndexByte(b[i:], 'e')
		if e < 0 {
			return 0, errors.New("bencode: unterminated integer")
		}
		return i + e + 1, nil
	case c == 'l' || c == 'd':
		i++
		for i < len(b) && b[i] != 'e' {
			var err error
			if i, err = bencodeSkip(b, i); err != nil {
				return 0, err
			}
		}
		if i >= len(b) {
			return 0, errors.New("bencode: unterminated list")
		}
		return i + 1, nil
	case c >= '0' && c <= '9':
		_, next, err := bencodeString(b, i)
		return next, err
	}
	return 0, fmt.Errorf("bencode: unexpected %q at %d", b[i], i)
}

// fmtSize prints a power-of-two size compactly: "256 KiB".
func fmtSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}
