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
const DEFAULT_MAX_MEMORY = 64 << 20; // webpeer.DefaultMaxMemory, for a peer.json without it

const wsURL = (u) => u.replace(/^http/, 'ws');

class Page {
  constructor(cfg) {
    this.cfg = cfg;
    this.peerId = crypto.getRandomValues(new Uint8Array(16));
    this.limiter = new Limiter(cfg.upload_rate, cfg.upload_total);
    this.signals = new Map();
    this.swarms = new Map();
    this.hidden = null;
    this.retired = { fromPeers: 0, fromOrigin: 0, uploaded: 0, corrupt: 0, connected: 0, offers: 0, answers: 0, offersIn: 0, busy: 0, banned: 0 }; // of the swarms dropped
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
    if (e.data && e.data.op === 'who') { hello(); return; }
    const port = e.ports[0];
    if (!port || !e.data || e.data.op !== 'get') return;
    if (this.asleep) { port.postMessage({ op: 'refuse' }); return; }
    const j = e.data.manifest;
    const key = j.root + ':' + j.size;
    let s = this.swarms.get(key);
    if (!s) {
      let m;
      try { m = await Manifest.parse(j); } catch (err) { this.log(err.message); port.postMessage({ op: 'refuse' }); return; }
      s = this.swarms.get(key); // made while the manifest was checked
      if (!s) {
        if (!this.makeRoom(m.size)) { this.log('no room for', e.data.url); port.postMessage({ op: 'refuse' }); return; }
        s = new Swarm({ manifest: m, url: e.data.url, peerId: this.peerId, signal: this.signal(m), cfg: this.cfg, limiter: this.limiter, log: this.log });
        this.swarms.set(key, s);
      }
    }
    this.swarms.delete(key); // the latest used last, for makeRoom
    this.swarms.set(key, s);
    port.postMessage({ op: 'accept' });
    // The pieces the worker wants: all of them, or those of a bundle's
    // member.
    const first = e.data.first ?? 0, last = e.data.last ?? s.m.n - 1;
    s.get((i, bytes) => { if (i >= first && i <= last) port.postMessage({ op: 'piece', i, bytes }); })
      .then(() => port.postMessage({ op: 'done' }), () => port.postMessage({ op: 'fail' }));
  }
  // makeRoom drops the swarms used least recently, those no download
  // waits for, until an object of size fits in cfg.max_memory with the
  // rest; false if it cannot.
  makeRoom(size) {
    const max = this.cfg.max_memory || DEFAULT_MAX_MEMORY;
    let held = 0;
    for (const s of this.swarms.values()) held += s.m.size;
    if (held + size <= max) return true;
    const idle = [...this.swarms].filter(([, s]) => !s.listeners.size);
    let free = 0;
    for (const [, s] of idle) free += s.m.size;
    if (held - free + size > max) return false;
    for (const [key, s] of idle) {
      if (held + size <= max) break;
      s.close();
      for (const k of Object.keys(s.stats)) this.retired[k] += s.stats[k];
      this.retired.banned += s.banned.size;
      this.swarms.delete(key);
      held -= s.m.size;
    }
    return true;
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
  // stats adds up what the page's swarms did, those dropped included:
  // bytes from peers and from the origin, bytes uploaded, corrupt pieces,
  // peers banned; and the bytes of the objects it holds now.
  stats() {
    const t = { ...this.retired, peers: 0, held: 0, timeline: {} };
    for (const s of this.swarms.values()) {
      t.held += s.m.size;
      t.timeline = s.timeline; // the latest swarm's
      for (const k of Object.keys(s.stats)) t[k] += s.stats[k];
      t.banned += s.banned.size;
      t.peers += s.conns.size;
    }
    return t;
  }
}

async function main() {
  if (!('serviceWorker' in navigator) || !self.isSecureContext) return 'unsupported';
  // A page under the worker takes the configuration from it (read from
  // the origin at most check_every_ms ago): a page view then asks the
  // origin nothing more than the page did. A first visit reads it.
  let cfg = null, told = false;
  const w = navigator.serviceWorker.controller;
  if (w && w.scriptURL.endsWith(WORKER)) {
    cfg = (await hello())?.cfg || null;
    told = true;
  }
  if (!cfg) {
    try {
      cfg = await (await fetch(CONFIG, { credentials: 'omit', cache: 'no-store' })).json();
    } catch { return 'no config'; }
  }
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
  worker.start(page);
  document.addEventListener('visibilitychange', () => page.onVisibility());
  // A first visit installs the worker once the page has loaded, so that
  // fetching and starting it does not compete with the page's own loads.
  if (!navigator.serviceWorker.controller && document.readyState !== 'complete') {
    await new Promise((r) => self.addEventListener('load', r, { once: true }));
  }
  await navigator.serviceWorker.register(WORKER, { scope: '/', type: 'module' });
  if (!navigator.serviceWorker.controller) {
    await new Promise((r) => navigator.serviceWorker.addEventListener('controllerchange', r, { once: true }));
  }
  if (!told) await hello();
  return 'on';
}

// hello tells the worker that this page runs the peer, so that it routes
// the page's requests here (it lets every other page's through), and
// resolves to its answer (with its configuration) once it has heard it.
function hello() {
  const w = navigator.serviceWorker.controller;
  if (!w) return Promise.resolve(null);
  const ch = new MessageChannel();
  const heard = new Promise((r) => { ch.port1.onmessage = (e) => r(e.data); setTimeout(() => r(null), 1000); });
  w.postMessage({ op: 'hello' }, [ch.port2]);
  return heard;
}

// worker takes the worker's messages from the start: the browser hands
// them out once the document is parsed, listened to or not, and the
// worker may ask for an object before the page's peer is up. They wait
// for it, and are refused at once if it stays off.
const worker = {
  page: null,
  off: false,
  early: [],
  listen() {
    if (!('serviceWorker' in navigator)) return;
    navigator.serviceWorker.addEventListener('message', (e) => {
      if (this.page) this.page.onWorker(e);
      else if (this.off || this.early.length >= 64) refuse(e);
      else this.early.push(e);
    });
    navigator.serviceWorker.startMessages();
  },
  start(page) {
    this.page = page;
    for (const e of this.early.splice(0)) page.onWorker(e);
  },
  stop() {
    this.off = true;
    for (const e of this.early.splice(0)) refuse(e);
  },
};
const refuse = (e) => { if (e.data && e.data.op === 'get' && e.ports[0]) e.ports[0].postMessage({ op: 'refuse' }); };
worker.listen();

// stampede.ready resolves to 'on' once the worker controls the page, or to
// why the peer stays off.
self.stampede = {
  ready: main().catch((e) => 'error: ' + e.message).then((r) => { if (r !== 'on') worker.stop(); return r; }),
};
