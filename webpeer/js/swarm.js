// swarm.js: one object's swarm in a visitor's page. Peers are other
// visitors (and native peers), reached over WebRTC data channels that the
// tracker's WebSocket signals (tracker/ws.go); over a channel both sides
// speak docs/protocol.md (wire.js). Every piece, from a peer or from the
// origin, is verified against the manifest (verify.js) before it is handed
// on; a peer that sends a bad one is told GOODBYE 8 and banned.

import * as wire from './wire.js';

const CHUNK = 16 << 10; // DATA payload per data channel message
const HIGH_WATER = 1 << 20; // bytes buffered in a channel before we wait
const KEEPALIVE_MS = 30000;
const UPLOAD_QUEUE = 8; // requests queued per connection, then REJECT busy
const REANNOUNCE_MS = 2000; // while short of peers and not done
const ICE_WAIT_MS = 3000;
const FIRST_ANSWER_MS = 1000; // the tracker's first answer awaited before offers
const ORIGIN_K = 3; // swarm's DefaultOriginK
const ORIGIN_SLICE_MS = 250; // swarm's OriginSlice
const OFFER_WAIT_MS = 1000; // how long our first offers may take to bring a peer
const CONNECT_WAIT_MS = 1500; // an answer given or taken may take this long to open its channel
// A visitor alone in a swarm that others joined a moment ago (the
// tracker's webrtc_recent) is in a crowd between arrivals: it waits this
// long for the next one rather than take the whole object from the
// origin. Meanwhile it takes its share of the origin as a member of that
// crowd (holdsOrigin), from the object's end, rather than leave the
// origin idle: the next arrival finds part of the object here, and one
// who came after the crowd ended does not wait with nothing. (It did not
// move the p90 of docs/browser.md's benchmark: the pair is then bound by
// the next arrival's own origin fetch.)
const CROWD_WAIT_MS = 1500;
// A peer still downloading that announced a piece this recently is
// feeding us (it takes from the origin what we lack): we leave the origin
// to it meanwhile, as the pool's members split the origin between them.
const FEED_MS = 500;
const HOST_GRACE_MS = 50; // without STUN or TURN, gathering waits this long past the first candidate
const ORIGIN_PARALLEL = 2;
const ORIGIN_RUN = 1 << 20; // bytes in one origin request at most
// Bytes asked of the origin at once, at most (and at least two pieces),
// by a page with peers, before the deadline: a slice of the origin rule
// it holds takes a window, not the whole rest of the object, so that
// pieces a peer brings a moment later are not fetched twice.
const ORIGIN_WINDOW = 128 << 10;
const TRIES = 2; // peers a piece is asked of before the origin
// Bytes asked of one peer at once, at most (and at least two pieces): its
// link's queue and the data channel's round trips must not leave it idle
// between requests. A connection starts at two pieces and asks one more
// for each piece it delivers; a busy refusal (a native peer refuses past
// half a second of its upload queued) halves it and pauses it for
// BUSY_PAUSE_MS, and is no failed try: the piece is asked again.
const PIPELINE = 256 << 10;
const BUSY_PAUSE_MS = 100;

const hex = wire.toHex;
const randomHex = (n) => hex(crypto.getRandomValues(new Uint8Array(n)));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Limiter caps uploads: rate bytes a second on average, total in all.
export class Limiter {
  constructor(rate, total) { this.rate = rate; this.total = total; this.sent = 0; this.tokens = rate; this.last = performance.now(); }
  // take waits until n bytes may go; false once the total is spent.
  async take(n) {
    if (this.sent + n > this.total) return false;
    for (;;) {
      const now = performance.now();
      // A bucket of a second's rate, or of n if larger: else a rate below
      // n a second would never let n through.
      this.tokens = Math.min(Math.max(this.rate, n), this.tokens + ((now - this.last) / 1000) * this.rate);
      this.last = now;
      if (this.tokens >= n) break;
      await sleep(Math.ceil(((n - this.tokens) / this.rate) * 1000));
    }
    this.tokens -= n;
    this.sent += n;
    return true;
  }
}

// Signal is the page's WebSocket to one tracker, shared by its swarms.
export class Signal {
  constructor(url, log) {
    this.url = url;
    this.log = log;
    this.swarms = new Map(); // root:size -> Swarm
    this.ws = null;
    this.queue = [];
    this.closed = false;
    this.open();
  }
  open() {
    if (this.closed) return;
    const ws = new WebSocket(this.url);
    this.ws = ws;
    ws.onopen = () => { for (const m of this.queue.splice(0)) ws.send(m); };
    ws.onmessage = (e) => {
      let m;
      try { m = JSON.parse(e.data); } catch { return; }
      const s = this.swarms.get(m.root + ':' + m.size);
      if (s) s.onSignal(m);
    };
    ws.onclose = () => { if (this.ws === ws) { this.ws = null; setTimeout(() => this.open(), 2000); } };
  }
  send(m) {
    const b = JSON.stringify({ action: 'announce', ...m });
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(b);
    else if (this.queue.length < 32) this.queue.push(b);
  }
  close() { this.closed = true; if (this.ws) this.ws.close(); }
}

// Conn is one data channel to a peer, after the handshake.
class Conn {
  constructor(swarm, pc, dc) {
    this.swarm = swarm;
    this.pc = pc;
    this.dc = dc;
    this.id = null; // hex peer ID, from its handshake
    this.their = new wire.Bits(swarm.m.n);
    this.unchoked = false; // they serve us
    this.inflight = new Map(); // piece -> {buf, got}
    this.depth = 2; // pieces asked at once (PIPELINE)
    this.pausedUntil = 0; // after a busy refusal
    this.haveAt = 0; // when it last announced a piece it got
    this.gotAt = 0; // when it last gave us a piece
    this.since = 0; // when its handshake came
    this.cancelled = new Set(); // pieces whose request we cancelled: their late DATA is no error
    // What our REQUESTs asked for in all, and the DATA that came: each
    // REQUEST gets at most one answer, so DATA past what we asked for is
    // unrequested, even for a cancelled piece whose late DATA is dropped.
    this.askedBytes = 0;
    this.gotBytes = 0;
    this.uploads = [];
    this.serving = false;
    this.hs = new Uint8Array(0);
    this.reader = null;
    this.closed = false;
    dc.binaryType = 'arraybuffer';
    dc.bufferedAmountLowThreshold = HIGH_WATER / 2;
    dc.onmessage = (e) => this.onData(new Uint8Array(e.data));
    dc.onclose = () => this.close();
    pc.onconnectionstatechange = () => { if (['failed', 'closed'].includes(pc.connectionState)) this.close(); };
    const s = swarm;
    this.sendRaw(wire.encodeHandshake({ caps: s.have.complete() ? wire.CAP_SEED : 0, root: s.m.root, size: s.m.size, peerId: s.peerId }));
    this.send({ type: wire.T.HAVESET, n: s.m.n, runs: s.have.runs() });
    this.send({ type: wire.T.UNCHOKE });
    this.keepalive = setInterval(() => this.send({ type: wire.T.KEEPALIVE }), KEEPALIVE_MS);
  }
  sendRaw(b) { if (!this.closed && this.dc.readyState === 'open') this.dc.send(b); }
  send(m) { this.sendRaw(wire.encodeFrame(m)); }
  onData(b) {
    try {
      if (!this.reader) {
        const hs = new Uint8Array(this.hs.length + b.length);
        hs.set(this.hs);
        hs.set(b, this.hs.length);
        if (hs.length < wire.HANDSHAKE_LEN) { this.hs = hs; return; }
        const h = wire.decodeHandshake(hs);
        const s = this.swarm;
        if (h.size !== s.m.size || wire.toHex(h.root) !== s.m.rootHex) return this.bye(1, 'wrong swarm');
        this.id = hex(h.peerId);
        this.since = performance.now();
        if (this.id === hex(s.peerId)) return this.bye(3, 'self');
        if (s.banned.has(this.id)) return this.bye(wire.BYE.CORRUPT, 'banned');
        if (s.conns.has(this.id)) return this.bye(4, 'duplicate');
        s.conns.set(this.id, this);
        this.reader = new wire.FrameReader(new wire.Geometry(s.m.size, s.m.pieceSize));
        b = hs.subarray(wire.HANDSHAKE_LEN);
      }
      this.reader.push(b);
      for (let m; (m = this.reader.next());) this.onMessage(m);
    } catch (e) {
      this.swarm.log('peer', this.id, 'broke the protocol:', e.message);
      this.bye(wire.BYE.PROTOCOL, 'protocol error');
    }
  }
  onMessage(m) {
    const s = this.swarm;
    switch (m.type) {
      case wire.T.HAVESET: for (const [a, b] of m.runs) for (let i = a; i < b; i++) this.their.add(i); this.haveAt = performance.now(); break;
      case wire.T.HAVE: this.their.add(m.piece); this.haveAt = performance.now(); break;
      case wire.T.UNCHOKE: this.unchoked = true; break;
      case wire.T.CHOKE: this.unchoked = false; break;
      case wire.T.REQUEST: this.onRequest(m); break;
      case wire.T.CANCEL: this.uploads = this.uploads.filter((r) => r.piece !== m.piece || r.offset !== m.offset); break;
      case wire.T.DATA: this.onPieceData(m); break;
      case wire.T.REJECT: this.onReject(m); break;
      case wire.T.GOODBYE: this.close(); break;
      default: break; // START, STOP, RATE, RECOMMEND, GETLAYER: hints a browser does without
    }
    s.schedule();
  }
  onReject(m) {
    const s = this.swarm;
    if (!this.inflight.delete(m.piece)) return;
    if (m.reason === wire.REJECT.BUSY) {
      s.stats.busy++;
      s.mark('busy');
      this.depth = Math.max(1, this.depth >> 1);
      this.pausedUntil = performance.now() + BUSY_PAUSE_MS;
      s.tries.set(m.piece, Math.max(0, (s.tries.get(m.piece) || 1) - 1));
      setTimeout(() => s.schedule(), BUSY_PAUSE_MS);
    }
    s.requeue(m.piece, this);
  }
  onRequest(m) {
    const s = this.swarm;
    if (!s.have.has(m.piece) || !s.serving) return this.send({ ...m, type: wire.T.REJECT, reason: wire.REJECT.DONT_HAVE });
    if (this.uploads.length >= UPLOAD_QUEUE) return this.send({ ...m, type: wire.T.REJECT, reason: wire.REJECT.BUSY });
    this.uploads.push({ piece: m.piece, offset: m.offset, length: m.length });
    if (!this.serving) this.serveUploads();
  }
  async serveUploads() {
    this.serving = true;
    const s = this.swarm;
    while (this.uploads.length && !this.closed) {
      const r = this.uploads[0];
      const data = s.pieces[r.piece];
      let off = r.offset;
      while (off < r.offset + r.length && !this.closed && this.uploads[0] === r) {
        const n = Math.min(CHUNK, r.offset + r.length - off);
        if (!(await s.limiter.take(n))) {
          // The page's upload allowance is spent: serve no one.
          s.serving = false;
          for (const u of this.uploads.splice(0)) this.send({ ...u, type: wire.T.REJECT, reason: wire.REJECT.CHOKED });
          this.send({ type: wire.T.CHOKE });
          break;
        }
        if (this.dc.bufferedAmount > HIGH_WATER) await new Promise((res) => { this.dc.onbufferedamountlow = res; });
        this.send({ type: wire.T.DATA, piece: r.piece, offset: off, bytes: data.subarray(off, off + n) });
        s.stats.uploaded += n;
        off += n;
      }
      if (this.uploads[0] === r) this.uploads.shift();
    }
    this.serving = false;
  }
  request(i) {
    this.cancelled.delete(i);
    const len = this.swarm.m.pieceLen(i);
    this.inflight.set(i, { buf: new Uint8Array(len), got: 0, at: performance.now() });
    this.askedBytes += len;
    this.send({ type: wire.T.REQUEST, piece: i, offset: 0, length: len });
  }
  async onPieceData(m) {
    this.gotBytes += m.bytes.length;
    if (this.gotBytes > this.askedBytes) return this.bye(wire.BYE.PROTOCOL, 'DATA past what was asked for');
    const f = this.inflight.get(m.piece);
    if (!f && this.cancelled.has(m.piece)) return; // the answer crossed our CANCEL: discarded
    if (!f || m.offset !== f.got) return this.bye(wire.BYE.PROTOCOL, 'DATA not asked for');
    f.buf.set(m.bytes, m.offset);
    f.got += m.bytes.length;
    if (f.got < f.buf.length) return;
    this.inflight.delete(m.piece);
    const s = this.swarm;
    if (await s.m.verify(m.piece, f.buf)) {
      s.stats.fromPeers += f.buf.length;
      this.gotAt = performance.now();
      this.depth = Math.min(this.depth + 1, Math.max(2, Math.floor(PIPELINE / s.m.pieceSize)));
      s.mark('fromPeer');
      s.complete(m.piece, f.buf);
    } else {
      s.stats.corrupt++;
      s.log('peer', this.id, 'sent a corrupt piece', m.piece, ': banned');
      s.banned.add(this.id);
      this.bye(wire.BYE.CORRUPT, 'corrupt data');
      s.requeue(m.piece, this);
    }
    s.schedule();
  }
  // feeding: it is still downloading, got a piece a moment ago and gave
  // us one a moment ago (or came a moment ago: its first pieces are on
  // their way). One that gets pieces but does not pass them on (its
  // upload is taken) does not feed us.
  feeding(now) {
    return !this.their.complete() && now - this.haveAt < FEED_MS && (now - this.gotAt < FEED_MS || now - this.since < FEED_MS);
  }
  bye(reason, text) {
    this.send({ type: wire.T.GOODBYE, reason, text });
    setTimeout(() => this.close(), 100);
  }
  close() {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.keepalive);
    const s = this.swarm;
    if (this.id && s.conns.get(this.id) === this) s.conns.delete(this.id);
    for (const i of this.inflight.keys()) s.requeue(i, this);
    this.inflight.clear();
    try { this.dc.close(); this.pc.close(); } catch { /* already closed */ }
    s.schedule();
  }
}

// Swarm downloads (and then serves) one object. cfg is peer.json's.
export class Swarm {
  constructor({ manifest, url, peerId, signal, cfg, limiter, log }) {
    this.m = manifest;
    this.url = url;
    this.peerId = peerId;
    this.signal = signal;
    this.cfg = cfg;
    this.limiter = limiter;
    this.log = log || (() => {});
    this.have = new wire.Bits(manifest.n);
    this.pieces = new Array(manifest.n).fill(null);
    this.conns = new Map();
    this.banned = new Set();
    this.offers = new Map(); // offer_id -> {pc, dc}
    this.tries = new Map(); // piece -> peers asked
    this.asked = new Set(); // pieces in flight (peer or origin)
    this.originQueue = [];
    this.originRuns = new Set(); // the runs being fetched from the origin
    this.originBusy = 0;
    this.serving = true;
    this.listeners = new Set();
    this.stats = { fromPeers: 0, fromOrigin: 0, uploaded: 0, corrupt: 0, connected: 0, offers: 0, answers: 0, offersIn: 0, busy: 0 };
    this.timeline = {}; // when each step first came (performance.now()): what a slow download waited for
    this.swarmSize = 0;
    this.others = -1; // the tracker's webrtc_peers: other WebRTC peers there (-1: not said)
    this.recent = 0; // the tracker's webrtc_recent: others arrived in the last few seconds
    this.crowdUntil = 0; // alone in a crowd: waiting for the next arrival until then
    this.connectingUntil = 0; // a channel answered may open until then
    this.started = performance.now();
    this.stopped = false;
    if (signal) signal.swarms.set(this.m.rootHex + ':' + this.m.size, this);
  }
  mark(step) { if (!(step in this.timeline)) this.timeline[step] = Math.round(performance.now()); }
  key() { return { root: this.m.rootHex, size: this.m.size, peer_id: hex(this.peerId) }; }

  // get calls onPiece(i, bytes) for every piece, verified, as each comes
  // (those already here at once), and resolves when all have.
  get(onPiece) {
    for (let i = 0; i < this.m.n; i++) if (this.pieces[i]) onPiece(i, this.pieces[i]);
    if (this.have.complete()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const l = (i, b) => {
        if (i < 0) { this.listeners.delete(l); reject(new Error('the origin failed too')); return; }
        onPiece(i, b);
        if (this.have.complete()) { this.listeners.delete(l); resolve(); }
      };
      this.listeners.add(l);
      this.start();
    });
  }
  async start() {
    if (this.running) return;
    this.running = true;
    this.stopped = false;
    this.mark('start');
    this.timer = setInterval(() => this.schedule(), 250);
    if (!this.signal) { this.toOriginAll(); return; }
    // First without offers, which take a moment to gather: a visitor
    // alone learns it at once and goes to the origin. Offers go only to a
    // swarm with someone else in it: a visitor alone would make them (five
    // peer connections gathering candidates) for no one, while its page
    // loads; those who come after offer to it.
    const answered = new Promise((r) => { this.onAnswer = r; setTimeout(r, FIRST_ANSWER_MS); });
    this.signal.send({ ...this.key(), left: this.left(), event: 'started', numwant: 0 });
    await answered;
    await this.announce('');
    this.reannounce = setInterval(() => {
      if (!this.have.complete() && this.conns.size < this.cfg.max_peers) this.announce('');
    }, REANNOUNCE_MS);
  }
  stop() {
    this.stopped = true;
    this.running = false;
    clearInterval(this.timer);
    clearInterval(this.reannounce);
    if (this.signal) this.signal.send({ ...this.key(), left: this.left(), event: 'stopped' });
    for (const c of [...this.conns.values()]) c.bye(wire.BYE.SHUTDOWN, 'page hidden');
    for (const o of this.offers.values()) o.pc.close();
    this.offers.clear();
  }
  // close leaves the swarm for good and lets go of its pieces.
  close() {
    this.stop();
    if (this.signal) this.signal.swarms.delete(this.m.rootHex + ':' + this.m.size);
    this.serving = false;
    this.pieces = [];
  }
  left() { let l = 0; for (let i = 0; i < this.m.n; i++) if (!this.have.has(i)) l += this.m.pieceLen(i); return l; }

  newPC() { return new RTCPeerConnection({ iceServers: (this.cfg.ice_servers || []).map((u) => (typeof u === 'string' ? { urls: u } : u)) }); }
  // gathered waits for pc's candidates: until gathering completes, for
  // ICE_WAIT_MS at most; without STUN or TURN servers, HOST_GRACE_MS past
  // the first candidate (host candidates come together; Chromium may take
  // far longer to call the gathering complete).
  async gathered(pc) {
    if (pc.iceGatheringState === 'complete') return;
    const hostOnly = !(this.cfg.ice_servers || []).length;
    await Promise.race([sleep(ICE_WAIT_MS), new Promise((r) => {
      pc.onicegatheringstatechange = () => { if (pc.iceGatheringState === 'complete') r(); };
      if (hostOnly) pc.onicecandidate = (e) => { if (e.candidate) setTimeout(r, HOST_GRACE_MS); };
    })]);
  }
  async announce(event) {
    // An offer for each other WebRTC peer the tracker knows, to which we
    // have no channel yet (all but the swarm's count, from a tracker that
    // does not say), five at most.
    const others = this.others >= 0 ? this.others - this.conns.size : this.swarmSize - 1;
    const want = this.have.complete() ? 0 : Math.min(5, others, this.cfg.max_peers - this.conns.size);
    const offers = [];
    this.offering = want > 0;
    for (const [id, o] of this.offers) if (performance.now() - o.at > 10000) { o.pc.close(); this.offers.delete(id); }
    await Promise.all(Array.from({ length: Math.max(0, want) }, async () => {
      const pc = this.newPC();
      const dc = pc.createDataChannel('stampede', { ordered: true });
      const id = randomHex(10);
      this.offers.set(id, { pc, dc, at: performance.now() });
      await pc.setLocalDescription(await pc.createOffer());
      await this.gathered(pc);
      offers.push({ offer_id: id, offer: { type: 'offer', sdp: pc.localDescription.sdp } });
    }));
    this.signal.send({ ...this.key(), left: this.left(), event, numwant: offers.length, offers });
    this.offering = false;
    if (offers.length) this.mark('offered');
    this.stats.offers += offers.length;
  }
  async onSignal(m) {
    if (this.stopped) return;
    if (m.error) { this.log('tracker:', m.error); return; }
    if (m.swarm_size !== undefined) {
      this.mark('tracker');
      this.swarmSize = m.swarm_size;
      if (m.webrtc_peers !== undefined) this.others = m.webrtc_peers;
      if (m.webrtc_recent !== undefined) this.recent = m.webrtc_recent;
      if (this.onAnswer) { this.onAnswer(); this.onAnswer = null; }
      const alone = m.webrtc_peers !== undefined ? m.webrtc_peers === 0 : m.swarm_size <= 1;
      if (alone && !this.conns.size) {
        if (m.webrtc_recent > 0) {
          // Others joined a moment ago and left: more are coming. Wait
          // for the next (it offers to us), once per lonely spell, taking
          // our share of the origin meanwhile (holdsOrigin).
          if (!this.crowdUntil) { this.mark('crowd'); this.crowdUntil = performance.now() + CROWD_WAIT_MS; setTimeout(() => this.schedule(), CROWD_WAIT_MS); this.schedule(); }
        } else { this.mark('alone'); this.toOriginAll(); } // no one to wait for
      } else if (!alone) this.crowdUntil = 0;
      return;
    }
    if (m.offer) {
      this.mark('offerIn');
      this.stats.offersIn++;
      if (this.banned.has(m.peer_id) || this.conns.has(m.peer_id) || this.conns.size >= this.cfg.max_peers) return;
      const pc = this.newPC();
      pc.ondatachannel = (e) => { e.channel.onopen = () => this.connected(pc, e.channel); };
      this.connectingUntil = performance.now() + CONNECT_WAIT_MS;
      await pc.setRemoteDescription(m.offer);
      await pc.setLocalDescription(await pc.createAnswer());
      await this.gathered(pc);
      this.connectingUntil = performance.now() + CONNECT_WAIT_MS;
      this.signal.send({ ...this.key(), to_peer_id: m.peer_id, offer_id: m.offer_id, answer: { type: 'answer', sdp: pc.localDescription.sdp } });
      setTimeout(() => { if (pc.connectionState !== 'connected') pc.close(); }, 15000);
      return;
    }
    if (m.answer) {
      const o = this.offers.get(m.offer_id);
      if (!o) return;
      this.offers.delete(m.offer_id);
      this.mark('answer');
      this.stats.answers++;
      if (this.banned.has(m.peer_id) || this.conns.has(m.peer_id)) { o.pc.close(); return; }
      o.dc.onopen = () => this.connected(o.pc, o.dc);
      this.connectingUntil = performance.now() + CONNECT_WAIT_MS;
      await o.pc.setRemoteDescription(m.answer);
    }
  }
  connected(pc, dc) {
    if (this.stopped) { pc.close(); return; }
    this.stats.connected++;
    this.mark('connected');
    new Conn(this, pc, dc);
  }

  complete(i, bytes) {
    if (this.have.has(i)) return;
    this.have.add(i);
    this.pieces[i] = bytes;
    this.asked.delete(i);
    for (const c of this.conns.values()) {
      const f = c.inflight.get(i);
      if (f) { c.send({ type: wire.T.CANCEL, piece: i, offset: 0, length: f.buf.length }); c.inflight.delete(i); c.cancelled.add(i); }
      c.send({ type: wire.T.HAVE, piece: i });
    }
    for (const l of [...this.listeners]) l(i, bytes);
    if (this.have.complete()) this.mark('done');
    if (this.have.complete() && this.signal) this.signal.send({ ...this.key(), left: 0, event: 'completed' });
  }
  requeue(i, conn) {
    if (this.have.has(i)) return;
    this.asked.delete(i);
    if ((this.tries.get(i) || 0) >= TRIES) this.toOrigin(i);
  }
  // schedule asks peers for the pieces still needed, and the origin for
  // those no peer of ours has, by the origin rule (holdsOrigin) or past
  // the deadline, or that failed TRIES times.
  schedule() {
    if (this.stopped || this.have.complete()) return;
    const now = performance.now();
    for (const c of this.conns.values()) {
      for (const [i, f] of c.inflight) {
        if (now - f.at > this.cfg.deadline_ms) { c.send({ type: wire.T.CANCEL, piece: i, offset: 0, length: f.buf.length }); c.inflight.delete(i); c.cancelled.add(i); this.requeue(i, c); this.tries.set(i, TRIES); this.toOrigin(i); }
      }
    }
    const serving = [...this.conns.values()].filter((c) => c.unchoked && c.reader);
    const conns = serving.filter((c) => c.pausedUntil <= now);
    const origin = this.holdsOrigin(now, serving);
    const past = now - this.started > this.cfg.deadline_ms;
    // With peers, or awaiting the next arrival, a window at a time; and
    // awaiting it, one window in each slice held (its share, not all the
    // origin sends).
    const waiting = !serving.length && now < this.crowdUntil;
    const window = Math.max(2, Math.floor(ORIGIN_WINDOW / this.m.pieceSize));
    let room = Infinity;
    if (waiting && !past) room = this.windowSlice === this.sliceAt ? 0 : window - this.originOut();
    else if (serving.length && !past) room = window - this.originOut();
    const spare = []; // pieces none of our peers has: the origin's, by its rule
    let unasked = 0;
    for (let i = 0; i < this.m.n; i++) {
      if (this.have.has(i) || this.asked.has(i)) continue;
      const holders = conns.filter((c) => c.their.has(i) && c.inflight.size < c.depth);
      if (holders.length) {
        const c = holders.reduce((a, b) => (b.inflight.size < a.inflight.size ? b : a));
        this.asked.add(i);
        this.tries.set(i, (this.tries.get(i) || 0) + 1);
        c.request(i);
      } else if (!serving.some((c) => c.their.has(i))) spare.push(i);
      else unasked++;
    }
    // The origin's pieces from the object's end: peers are asked from
    // its start (and a feeding peer's pieces come in about that order),
    // so the two meet in the middle rather than fetch the same pieces.
    if ((origin || past) && room > 0 && spare.length) {
      if (waiting) this.windowSlice = this.sliceAt;
      while (room-- > 0 && spare.length) this.toOrigin(spare.pop());
    }
    unasked += spare.length;
    if (!unasked) this.endgame(conns);
  }
  // holdsOrigin is the origin rule of the native scheduler (swarm/origin.go),
  // for the pieces no peer of ours has: time is cut into slices of
  // ORIGIN_SLICE_MS, and each is ours with probability ORIGIN_K/n, n the
  // tracker's swarm size (at least our peers and us), so that about
  // ORIGIN_K peers of a swarm go to the origin at once however large it
  // is, and a swarm of a few does not wait for the deadline. Not before
  // the tracker's first answer; nor, with no peer, while our offers may
  // still bring us one (for a second after them) or a channel answered
  // may still open; nor while a peer still downloading feeds us (its
  // pieces come from the origin: the pool splits the origin rather than
  // fetch a piece twice). Alone in a crowd, awaiting the next arrival, n
  // is the crowd: us and those who arrived in the last few seconds (the
  // tracker's webrtc_recent), whose next will split the origin with us.
  holdsOrigin(now, serving) {
    const peers = serving.length;
    if (!this.swarmSize) return false;
    if (!peers) {
      const offered = this.timeline.offered ?? (this.offering ? now : -Infinity); // offers being made count as made now
      if (now - offered < OFFER_WAIT_MS || now < this.connectingUntil) return false;
      if (now < this.crowdUntil) return this.draw(now, this.recent + 1);
      if (this.others === 0 || (this.others < 0 && this.swarmSize === 1)) return true; // alone
    }
    if (serving.some((c) => c.feeding(now))) return false;
    return this.draw(now, Math.max(this.swarmSize, peers + 1));
  }
  // draw holds the origin for the current slice with probability
  // ORIGIN_K/n, drawn once a slice.
  draw(now, n) {
    if (now - (this.sliceAt || 0) >= ORIGIN_SLICE_MS) {
      this.sliceAt = now;
      this.holding = Math.random() < ORIGIN_K / n;
      if (this.holding) this.mark('holds');
    }
    return this.holding;
  }
  // endgame: every piece still missing is asked of someone; a peer with
  // room asks for those in flight with another peer too, so that the last
  // pieces do not wait for the slowest peer (complete cancels the other).
  endgame(conns) {
    for (const c of conns) {
      for (let i = 0; i < this.m.n && c.inflight.size < c.depth; i++) {
        if (this.have.has(i) || c.inflight.has(i) || !c.their.has(i)) continue;
        let with_ = 0;
        for (const o of conns) if (o.inflight.has(i)) with_++;
        if (with_ === 1) c.request(i);
      }
    }
  }
  // originOut counts the pieces queued for the origin or on their way.
  originOut() {
    let n = this.originQueue.length;
    for (const run of this.originRuns) for (const i of run) if (!this.have.has(i)) n++;
    return n;
  }
  toOriginAll() { for (let i = 0; i < this.m.n; i++) if (!this.have.has(i) && !this.asked.has(i)) this.toOrigin(i); }
  toOrigin(i) {
    if (this.have.has(i) || this.originQueue.includes(i)) return;
    this.mark('toOrigin');
    this.asked.add(i);
    this.originQueue.push(i);
    // Once the caller has queued all it will, so that runs go together.
    if (!this.pumpSoon) {
      this.pumpSoon = true;
      queueMicrotask(() => { this.pumpSoon = false; this.pumpOrigin(); });
    }
  }
  // pumpOrigin fetches the queued pieces from the origin, runs of
  // consecutive ones in one request each (at most ORIGIN_RUN bytes), at
  // most ORIGIN_PARALLEL requests at once.
  pumpOrigin() {
    while (this.originBusy < ORIGIN_PARALLEL && this.originQueue.length) {
      this.originQueue.sort((a, b) => a - b);
      const run = [this.originQueue.shift()];
      while (this.originQueue[0] === run[run.length - 1] + 1 && (run.length + 1) * this.m.pieceSize <= ORIGIN_RUN) run.push(this.originQueue.shift());
      const want = run.filter((i) => !this.have.has(i));
      if (!want.length) continue;
      this.originBusy++;
      this.originRuns.add(want);
      this.fromOrigin(want).finally(() => { this.originBusy--; this.originRuns.delete(want); this.pumpOrigin(); if (!this.failed) this.schedule(); });
    }
  }
  // fromOrigin gets pieces (consecutive) with one Range request, verifying
  // each as its bytes arrive; it tries again for those still missing.
  async fromOrigin(pieces) {
    for (let attempt = 0; attempt < 3; attempt++) {
      const left = pieces.filter((i) => !this.have.has(i));
      if (!left.length) return;
      const first = left[0], last = left[left.length - 1];
      const start = first * this.m.pieceSize, end = last * this.m.pieceSize + this.m.pieceLen(last) - 1;
      try {
        // A Range request: the service worker lets it through to the
        // origin. No credentials: only public objects are swarmed.
        const r = await fetch(this.url, { headers: { Range: `bytes=${start}-${end}` }, credentials: 'omit', cache: 'no-store' });
        if (r.status !== 206) throw new Error('the origin answered ' + r.status);
        const rd = r.body.getReader();
        let i = first, buf = new Uint8Array(this.m.pieceLen(i)), got = 0;
        for (;;) {
          const { done, value } = await rd.read();
          if (done) break;
          for (let off = 0; off < value.length && i <= last;) {
            const n = Math.min(value.length - off, buf.length - got);
            buf.set(value.subarray(off, off + n), got);
            got += n;
            off += n;
            if (got === buf.length) {
              if (!(await this.m.verify(i, buf))) throw new Error('piece ' + i + ' from the origin did not verify');
              this.stats.fromOrigin += buf.length;
              this.complete(i, buf);
              if (++i <= last) { buf = new Uint8Array(this.m.pieceLen(i)); got = 0; }
            }
          }
        }
      } catch (e) { this.log('origin:', e.message); }
      if (pieces.every((i) => this.have.has(i))) return;
      await sleep(500 * (attempt + 1));
    }
    for (const i of pieces) this.asked.delete(i);
    if (pieces.some((i) => !this.have.has(i))) { this.failed = true; for (const l of [...this.listeners]) l(-1, null); }
  }
}
