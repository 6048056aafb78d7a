// peer.js: a site opts in with
//
//   <script type="module" src="/.well-known/stampede/peer.js"></script>
//
// It reads the origin's peer.json (the kill switch and the limits),
// registers the service worker that intercepts the site's objects, and
// runs their swarms in the page, since a worker has no RTCPeerConnection.
// It does nothing on Save-Data or a cellular connection, without WebRTC or
// service workers, or when the origin says off (then it unregisters the
// worker too). The page works the same whatever it does.

import { Manifest } from './peer/verify.js';
import { Signal, Swarm, Limiter } from './peer/swarm.js';

const CONFIG = '/.well-known/stampede/peer.json';
const WORKER = '/.well-known/stampede/peer/sw.js';

const wsURL = (u) => u.replace(/^http/, 'ws');

class Page {
  constructor(cfg) {
    this.cfg = cfg;
    this.peerId = crypto.getRandomValues(new Uint8Array(16));
    this.limiter = new Limiter(cfg.upload_rate, cfg.upload_total);
    this.signals = new Map();
    this.swarms = new Map();
    this.hidden = null;
    this.asleep = false;
    this.log = (...a) => { if (self.stampedeDebug) console.log('stampede:', ...a); };
  }
  signal(m) {
    const t = m.trackers.find((u) => /^https?:/.test(u));
    if (!t) return null;
    if (!this.signals.has(t)) this.signals.set(t, new Signal(wsURL(t), this.log));
    return this.signals.get(t);
  }
  async onWorker(e) {
    const port = e.ports[0];
    if (!port || !e.data || e.data.op !== 'get') return;
    if (this.asleep) { port.postMessage({ op: 'refuse' }); return; }
    const j = e.data.manifest;
    const key = j.root + ':' + j.size;
    let s = this.swarms.get(key);
    if (!s) {
      let m;
      try { m = await Manifest.parse(j); } catch (err) { this.log(err.message); port.postMessage({ op: 'refuse' }); return; }
      s = new Swarm({ manifest: m, url: e.data.url, peerId: this.peerId, signal: this.signal(m), cfg: this.cfg, limiter: this.limiter, log: this.log });
      this.swarms.set(key, s);
    }
    port.postMessage({ op: 'accept' });
    s.get((i, bytes) => port.postMessage({ op: 'piece', i, bytes }))
      .then(() => port.postMessage({ op: 'done' }), () => port.postMessage({ op: 'fail' }));
  }
  // sleep stops every swarm once the page has been hidden for
  // cfg.hidden_stop_ms; wake starts them again.
  onVisibility() {
    if (document.visibilityState === 'hidden') {
      this.hidden = setTimeout(() => { this.asleep = true; for (const s of this.swarms.values()) s.stop(); }, this.cfg.hidden_stop_ms);
      return;
    }
    clearTimeout(this.hidden);
    if (this.asleep) { this.asleep = false; for (const s of this.swarms.values()) s.start(); }
  }
  // stats adds up what the page's swarms did: bytes from peers and from
  // the origin, bytes uploaded, corrupt pieces, peers banned.
  stats() {
    const t = { fromPeers: 0, fromOrigin: 0, uploaded: 0, corrupt: 0, connected: 0, banned: 0, peers: 0 };
    for (const s of this.swarms.values()) {
      for (const k of ['fromPeers', 'fromOrigin', 'uploaded', 'corrupt', 'connected']) t[k] += s.stats[k];
      t.banned += s.banned.size;
      t.peers += s.conns.size;
    }
    return t;
  }
}

async function main() {
  if (!('serviceWorker' in navigator) || !self.isSecureContext) return 'unsupported';
  let cfg;
  try {
    cfg = await (await fetch(CONFIG, { credentials: 'omit', cache: 'no-store' })).json();
  } catch { return 'no config'; }
  if (!cfg.enabled) {
    for (const r of await navigator.serviceWorker.getRegistrations()) {
      if ((r.active || r.installing || r.waiting)?.scriptURL.endsWith(WORKER)) await r.unregister();
    }
    return 'off';
  }
  const c = navigator.connection;
  if (c && (c.saveData || c.type === 'cellular')) return 'save-data';
  if (typeof RTCPeerConnection !== 'function') return 'no webrtc';
  const page = new Page(cfg);
  self.stampede.page = page;
  navigator.serviceWorker.addEventListener('message', (e) => page.onWorker(e));
  navigator.serviceWorker.startMessages();
  document.addEventListener('visibilitychange', () => page.onVisibility());
  await navigator.serviceWorker.register(WORKER, { scope: '/', type: 'module' });
  if (!navigator.serviceWorker.controller) {
    await new Promise((r) => navigator.serviceWorker.addEventListener('controllerchange', r, { once: true }));
  }
  return 'on';
}

// stampede.ready resolves to 'on' once the worker controls the page, or to
// why the peer stays off.
self.stampede = { ready: main().catch((e) => 'error: ' + e.message) };
