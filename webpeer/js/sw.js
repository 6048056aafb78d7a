// sw.js: the service worker of the browser peer, registered by peer.js for
// the whole site (served with Service-Worker-Allowed: /). It intercepts
// same-origin GETs of objects that have a manifest, from pages that run
// peer.js, and gets them through the page's swarm; it lets through
// everything else (navigations, every request of a page without the tag,
// ranges, queries, /.well-known/, objects below min_size, Save-Data) untouched, falls back
// to the origin when the page does not take the object within a second or
// stalls past the deadline, and unregisters itself when the origin says
// off (peer.json, or Stampede-Peer: off on a manifest's answer).

const CONFIG = '/.well-known/stampede/peer.json';
const MANIFEST = '/.well-known/stampede/manifest';
const BUNDLE_INDEX = '/.well-known/stampede/bundle-index';
// How long a page has to take a request: one that said hello runs the
// peer and answers, if slowly on a busy machine; one known only by its
// path may not have started its peer yet, or never will.
const ACCEPT_MS = 1000;
const ACCEPT_HELLO_MS = 5000;
const MEMO = 256; // manifests (and their absence) remembered

let cfg = null, cfgAt = 0, off = false;
const manifests = new Map(); // path -> manifest JSON, or null: none
const bundles = new Map(); // page path -> its bundle (bundleOf), or null: none

// The worker's scope is the whole site, and only pages with the tag run a
// swarm: a request of any other page goes through untouched, without even
// a manifest's lookup. A page that runs peer.js says hello (its client
// ID, which its requests carry); a page whose path said hello before is
// one too from its navigation on, so that what it asks before peer.js
// has run (its images) waits for it rather than passing it by.
const peers = new Map(); // client ID -> true, of the pages that said hello
const pageOf = new Map(); // client ID -> path, from navigations
const tagged = new Map(); // paths of the pages that said hello -> true

self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (e) => e.waitUntil(Promise.all([self.clients.claim().then(who), config()])));

function standDown() {
  off = true;
  self.registration.unregister();
}

// troubled is an answer that says nothing of the peer: the origin (or a
// proxy before it) is overloaded or failing, as in the flash crowds the
// peer is for.
const troubled = (r) => r.status === 429 || r.status >= 500;

async function config() {
  if (cfg && Date.now() - cfgAt < cfg.check_every_ms) return cfg;
  let r;
  try {
    r = await fetch(CONFIG, { cache: 'no-store', credentials: 'omit' });
  } catch { return cfg; } // offline: keep what we knew
  if (troubled(r)) return cfg;
  // Anything else but the peer's configuration (404, a page that is not
  // JSON: the site serves no peer any more) stands the worker down.
  cfg = r.ok ? await r.json().catch(() => ({ enabled: false })) : { enabled: false };
  cfgAt = Date.now();
  if (!cfg || !cfg.enabled) { cfg = { enabled: false }; standDown(); }
  return cfg;
}

// put sets m's key k, forgetting the oldest entries past MEMO.
function put(m, k, v) {
  m.delete(k);
  if (m.size >= MEMO) m.delete(m.keys().next().value);
  m.set(k, v);
}
const remember = (path, j) => put(manifests, path, j);

self.addEventListener('message', (e) => {
  if (!e.data || e.data.op !== 'hello' || !e.source) return;
  put(peers, e.source.id, true);
  put(tagged, new URL(e.source.url).pathname, true);
  // With the configuration: the page need not ask the origin for it.
  if (e.ports[0]) { const port = e.ports[0]; e.waitUntil(config().then((c) => port.postMessage({ op: 'ok', cfg: c }), () => port.postMessage({ op: 'ok' }))); }
});
// A worker started afresh knows no page: the open ones say hello again.
const who = () => self.clients.matchAll({ type: 'window', includeUncontrolled: true })
  .then((cs) => { for (const c of cs) c.postMessage({ op: 'who' }); }, () => {});
who();

// saving is peer.js's test: its page runs no swarm then, so asking it
// would only cost the wait for an answer that never comes.
const saving = () => { const c = self.navigator.connection; return !!c && (c.saveData || c.type === 'cellular'); };

self.addEventListener('fetch', (e) => {
  const r = e.request;
  if (r.mode === 'navigate') {
    if (e.resultingClientId) put(pageOf, e.resultingClientId, new URL(r.url).pathname);
    return;
  }
  if (!peers.has(e.clientId) && !tagged.has(pageOf.get(e.clientId))) return;
  if (off || r.method !== 'GET' || r.headers.has('range') || r.headers.get('save-data') === 'on' || saving()) return;
  const u = new URL(r.url);
  if (u.origin !== self.location.origin || u.search || u.pathname.startsWith('/.well-known/')) return;
  if (manifests.get(u.pathname) === null) return;
  e.respondWith(swarmed(e, u));
});

async function manifestOf(path) {
  if (manifests.has(path)) return manifests.get(path);
  // Without credentials: what the origin serves anyone is public.
  const r = await fetch(MANIFEST + path, { credentials: 'omit' });
  if (r.headers.get('stampede-peer') === 'off') { standDown(); return null; }
  if (troubled(r)) return null; // not remembered: asked again next time
  const j = r.ok ? await r.json().catch(() => null) : null;
  remember(path, j);
  return j;
}

async function swarmed(e, u) {
  try {
    const c = await config();
    if (off || !c || !c.enabled) return fetch(e.request);
    const client = await self.clients.get(e.clientId);
    if (!client) return fetch(e.request);
    const j = await manifestOf(u.pathname);
    if (j && j.size >= c.min_size) {
      return await fromPage(client, j, e.request, c, { url: u.pathname, offset: 0, size: j.size, type: typeOf(u.pathname), etag: j.etag });
    }
    // Too small to swarm alone: from the page's bundle, if it has one
    // that holds it.
    const b = await bundleOf(new URL(client.url).pathname);
    const m = b && b.manifest.size >= c.min_size && b.members.get(u.pathname);
    if (!m) return fetch(e.request);
    return await fromPage(client, b.manifest, e.request, c, { url: u.pathname, offset: m.offset, size: m.size, type: m.content_type || typeOf(u.pathname), etag: m.etag });
  } catch {
    return fetch(e.request);
  }
}

// bundleOf is the bundle of the page at path (origin/bundle.go: the page
// and its assets as one object), as {manifest, members: path -> member},
// or null. The index must be the version the manifest is of (their ETags
// agree): the offsets of another would cut the wrong bytes.
async function bundleOf(path) {
  if (path.endsWith('/')) path += 'index.html';
  if (bundles.has(path)) return bundles.get(path);
  let b = null;
  const r = await fetch(BUNDLE_INDEX + path, { credentials: 'omit' });
  if (troubled(r)) return null; // not remembered: asked again next time
  const idx = r.ok ? await r.json().catch(() => null) : null;
  if (idx && idx.version === 1 && Array.isArray(idx.members)) {
    const bundle = new URL(idx.bundle, new URL(BUNDLE_INDEX + path, self.location.origin)).pathname;
    const j = await manifestOf(bundle);
    if (j && j.size === idx.size && j.etag && j.etag === r.headers.get('etag')) {
      const members = new Map();
      for (const m of idx.members) if (m.offset >= 0 && m.size > 0 && m.offset + m.size <= j.size) members.set(m.path, m);
      b = { manifest: { ...j, url: bundle }, members };
    }
  }
  put(bundles, path, b);
  return b;
}

const TYPES = { html: 'text/html', js: 'text/javascript', mjs: 'text/javascript', css: 'text/css', json: 'application/json', svg: 'image/svg+xml', png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', gif: 'image/gif', webp: 'image/webp', avif: 'image/avif', mp4: 'video/mp4', webm: 'video/webm', mp3: 'audio/mpeg', wasm: 'application/wasm', woff2: 'font/woff2', txt: 'text/plain', pdf: 'application/pdf' };
const typeOf = (p) => TYPES[(p.split('.').pop() || '').toLowerCase()] || 'application/octet-stream';

// fromPage streams the bytes of want ({url, offset, size, type, etag}:
// the object, or a member of a bundle) from the pieces of the object of
// manifest j, in order, as the page verifies them; what the page cannot
// give in time comes from the origin (want.url, from the bytes sent on).
function fromPage(client, j, req, c, want) {
  return new Promise((resolve) => {
    const ch = new MessageChannel();
    const first = Math.floor(want.offset / j.piece_size);
    const last = Math.max(first, Math.ceil((want.offset + want.size) / j.piece_size) - 1);
    const pieces = new Map();
    let next = first, sent = 0, accepted = false, finished = false, lastAt = Date.now(), ctrl;
    const stream = new ReadableStream({ start(k) { ctrl = k; } });
    const end = () => { finished = true; ch.port1.close(); clearInterval(watch); clearTimeout(timer); };
    const fallback = () => { end(); resolve(fetch(req)); };
    const timer = setTimeout(() => { if (!accepted) fallback(); }, peers.has(client.id) ? ACCEPT_HELLO_MS : ACCEPT_MS);
    const flush = () => {
      while (pieces.has(next)) {
        const b = pieces.get(next);
        pieces.delete(next);
        // The part of the piece that is want's.
        const at = next * j.piece_size;
        const from = Math.max(0, want.offset + sent - at), to = Math.min(b.length, want.offset + want.size - at);
        if (to > from) { ctrl.enqueue(b.subarray(from, to)); sent += to - from; }
        next++;
      }
      if (sent === want.size) { end(); ctrl.close(); }
    };
    // rest has the origin finish what the page could not.
    const rest = async () => {
      end();
      try {
        const h = { Range: `bytes=${sent}-` };
        if (want.etag) h['If-Range'] = want.etag;
        const r = await fetch(want.url, { headers: h, credentials: 'omit' });
        if (r.status !== 206) throw new Error('the origin answered ' + r.status + ' to a range');
        const rd = r.body.getReader();
        for (;;) {
          const { done, value } = await rd.read();
          if (done) break;
          ctrl.enqueue(value);
        }
        ctrl.close();
      } catch (err) { ctrl.error(err); }
    };
    const watch = setInterval(() => { if (accepted && !finished && Date.now() - lastAt > 2 * c.deadline_ms) rest(); }, 250);
    ch.port1.onmessage = ({ data: d }) => {
      if (finished) return;
      switch (d.op) {
        case 'accept':
          accepted = true;
          clearTimeout(timer);
          resolve(new Response(stream, { status: 200, headers: {
            'Content-Type': want.type, 'Content-Length': String(want.size), 'Stampede-Via': 'swarm', ...(want.etag ? { ETag: want.etag } : {}),
          } }));
          break;
        case 'piece': lastAt = Date.now(); if (d.i >= next && d.i <= last) pieces.set(d.i, d.bytes); flush(); break;
        case 'refuse': fallback(); break;
        case 'fail': if (accepted) rest(); else fallback(); break;
      }
    };
    client.postMessage({ op: 'get', url: j.url || want.url, manifest: j, first, last }, [ch.port2]);
  });
}
