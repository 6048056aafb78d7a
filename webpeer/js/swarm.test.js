// Tests swarm.js under node: the upload limiter, and a connection's
// answers over a fake data channel.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as wire from './wire.js';
import { Limiter, Swarm } from './swarm.js';

test('the limiter refuses past its total', async () => {
  const l = new Limiter(1 << 30, 100);
  assert.equal(await l.take(60), true);
  assert.equal(await l.take(40), true);
  assert.equal(await l.take(1), false);
  assert.equal(l.sent, 100);
});

test('the limiter holds the rate', async () => {
  const l = new Limiter(100 << 10, 1 << 30); // 100 KiB/s, a second's burst
  l.tokens = 0;
  const t0 = performance.now();
  for (let i = 0; i < 5; i++) assert.equal(await l.take(10 << 10), true);
  const ms = performance.now() - t0;
  // 50 KiB at 100 KiB/s: half a second, not at once.
  assert.ok(ms >= 400, `50 KiB went in ${ms} ms`);
});

test('the limiter lets through more than a second\'s rate, in time', { timeout: 10000 }, async () => {
  const l = new Limiter(10 << 10, 1 << 30); // 10 KiB/s, and a 16 KiB chunk
  l.tokens = 0;
  const t0 = performance.now();
  assert.equal(await l.take(16 << 10), true);
  const ms = performance.now() - t0;
  assert.ok(ms >= 1400, `16 KiB at 10 KiB/s went in ${ms} ms`);
});

// A swarm with one connection over a fake data channel, its handshake
// in; sent collects what the page wrote to it.
function connected() {
  const PIECE = 16 << 10, n = 4;
  const m = { n, size: n * PIECE, pieceSize: PIECE, root: new Uint8Array(32), rootHex: '00'.repeat(32), pieceLen: () => PIECE };
  const s = new Swarm({ manifest: m, url: '/x', peerId: new Uint8Array(16), signal: null, cfg: { max_peers: 8, deadline_ms: 60000 }, limiter: new Limiter(1 << 20, 1 << 30) });
  const sent = [];
  const dc = { readyState: 'open', bufferedAmount: 0, send: (b) => sent.push(b), close() {} };
  s.connected({ close() {} }, dc);
  dc.onmessage({ data: wire.encodeHandshake({ caps: 0, root: m.root, size: m.size, peerId: new Uint8Array(16).fill(7) }).buffer });
  const stop = () => {
    s.stopped = true;
    for (const c of [...s.conns.values()]) c.close();
  };
  return { s, m, dc, sent, PIECE, n, stop };
}

// framesOf decodes the frames the page sent after its handshake.
function framesOf(sent, m) {
  const out = new Uint8Array(sent.reduce((a, b) => a + b.length, 0));
  sent.reduce((off, b) => { out.set(b, off); return off + b.length; }, 0);
  const r = new wire.FrameReader(new wire.Geometry(m.size, m.pieceSize));
  r.push(out.subarray(wire.HANDSHAKE_LEN));
  const fs = [];
  for (let f; (f = r.next());) fs.push(f);
  return fs;
}

test('a request for a piece the page lacks is answered REJECT', () => {
  const { m, dc, sent, PIECE, n, stop } = connected();
  for (const f of [{ type: wire.T.HAVESET, n, runs: [] }, { type: wire.T.REQUEST, piece: 1, offset: 0, length: PIECE }]) {
    dc.onmessage({ data: wire.encodeFrame(f).slice().buffer });
  }
  stop();
  const answer = framesOf(sent, m).find((f) => f.piece === 1);
  assert.ok(answer, 'no answer to the request');
  assert.equal(answer.type, wire.T.REJECT);
  assert.equal(answer.reason, wire.REJECT.DONT_HAVE);
});

test('a peer resending a cancelled piece is cut off once past what was asked', async () => {
  const { s, m, sent, PIECE, stop } = connected();
  s.toOriginAll = () => {};
  const c = [...s.conns.values()][0];
  try {
    assert.ok(c, 'no connection after the handshake');
    // Asked once, then cancelled, as a deadline does.
    c.request(2);
    c.inflight.delete(2);
    c.cancelled.add(2);
    const copy = { type: wire.T.DATA, piece: 2, offset: 0, bytes: new Uint8Array(PIECE) };
    const goodbyes = () => framesOf(sent, m).filter((f) => f.type === wire.T.GOODBYE);
    await c.onPieceData(copy);
    assert.equal(goodbyes().length, 0, 'the late answer to a cancelled request is no error');
    await c.onPieceData({ ...copy, bytes: new Uint8Array(1) });
    const bye = goodbyes();
    assert.equal(bye.length, 1, 'a second copy past what was asked went unanswered');
    assert.equal(bye[0].reason, wire.BYE.PROTOCOL);
  } finally {
    stop();
  }
});

// A swarm without a tracker or peers, its origin fetches counted, not made.
function idleSwarm() {
  const PIECE = 16 << 10, n = 4;
  const m = { n, size: n * PIECE, pieceSize: PIECE, root: new Uint8Array(32), rootHex: '00'.repeat(32), pieceLen: () => PIECE };
  const s = new Swarm({ manifest: m, url: '/x', peerId: new Uint8Array(16), signal: null, cfg: { max_peers: 8, deadline_ms: 60000 }, limiter: new Limiter(1 << 20, 1 << 30) });
  s.toOriginAll = () => { s.allToOrigin = true; };
  return s;
}

test('alone, with no one arrived lately, the page goes to the origin at once', () => {
  const s = idleSwarm();
  s.onSignal({ swarm_size: 1, webrtc_peers: 0, webrtc_recent: 0 });
  assert.equal(s.allToOrigin, true);
  assert.equal(s.holdsOrigin(performance.now(), []), true);
});

// withRandom runs f with Math.random returning r.
function withRandom(r, f) {
  const saved = Math.random;
  Math.random = () => r;
  try { f(); } finally { Math.random = saved; }
}

test('alone in a crowd, the page waits for the next arrival, then takes the origin', () => {
  const s = idleSwarm();
  withRandom(0.99, () => s.onSignal({ swarm_size: 1, webrtc_peers: 0, webrtc_recent: 9 }));
  assert.equal(s.allToOrigin, undefined);
  assert.ok('crowd' in s.timeline);
  const now = performance.now();
  // The crowd is 10 (9 arrived lately, and us): 3 slices in 10 are ours.
  withRandom(0.5, () => assert.equal(s.holdsOrigin(now, []), false, 'took the origin past its share of the crowd'));
  s.sliceAt = 0;
  withRandom(0.2, () => assert.equal(s.holdsOrigin(now, []), true, 'no share of the origin while the next arrival was awaited'));
  assert.equal(s.holdsOrigin(now + 2000, []), true, 'still waiting past the crowd wait');
  // A second lonely answer does not wait again.
  const until = s.crowdUntil;
  s.onSignal({ swarm_size: 3, webrtc_peers: 0, webrtc_recent: 2 });
  assert.equal(s.crowdUntil, until);
});

test('awaiting the next arrival, the page takes one window from the object\'s end in each slice it holds', () => {
  const PIECE = 16 << 10, n = 32;
  const m = { n, size: n * PIECE, pieceSize: PIECE, root: new Uint8Array(32), rootHex: '00'.repeat(32), pieceLen: () => PIECE };
  const s = new Swarm({ manifest: m, url: '/x', peerId: new Uint8Array(16), signal: null, cfg: { max_peers: 8, deadline_ms: 60000 }, limiter: new Limiter(1 << 20, 1 << 30) });
  const queued = [];
  s.toOrigin = (i) => { queued.push(i); s.asked.add(i); };
  s.originOut = () => 0; // the window came back at once
  withRandom(0, () => s.onSignal({ swarm_size: 1, webrtc_peers: 0, webrtc_recent: 4 }));
  const window = (128 << 10) / PIECE;
  assert.deepEqual(queued, Array.from({ length: window }, (_, k) => n - 1 - k), 'not the last window first');
  withRandom(0, () => s.schedule());
  assert.equal(queued.length, window, 'a second window in the same slice');
  s.sliceAt -= 300; // the next slice, not ours
  withRandom(0.99, () => s.schedule());
  assert.equal(queued.length, window, 'a window in a slice not held');
  s.sliceAt -= 300; // the next, ours
  withRandom(0, () => s.schedule());
  assert.equal(queued.length, 2 * window);
  assert.equal(queued.at(-1), n - 2 * window);
});

test('a peer still downloading that feeds the page keeps it off the origin', () => {
  const s = idleSwarm();
  s.onSignal({ swarm_size: 2, webrtc_peers: 1, webrtc_recent: 1 });
  const now = performance.now();
  // n = 2: the origin rule holds every slice but for a feeding peer.
  assert.equal(s.holdsOrigin(now, [{ feeding: () => true }]), false);
  s.sliceAt = 0;
  assert.equal(s.holdsOrigin(now, [{ feeding: () => false }]), true);
});

test('a connection feeds while downloading and announcing pieces', () => {
  const PIECE = 16 << 10, n = 4;
  const m = { n, size: n * PIECE, pieceSize: PIECE, root: new Uint8Array(32), rootHex: '00'.repeat(32), pieceLen: () => PIECE };
  const s = new Swarm({ manifest: m, url: '/x', peerId: new Uint8Array(16), signal: null, cfg: { max_peers: 8, deadline_ms: 60000 }, limiter: new Limiter(1 << 20, 1 << 30) });
  s.schedule = () => {};
  const dc = { readyState: 'open', bufferedAmount: 0, send() {}, close() {} };
  s.connected({ close() {} }, dc);
  const frame = (f) => dc.onmessage({ data: wire.encodeFrame(f).slice().buffer });
  dc.onmessage({ data: wire.encodeHandshake({ caps: 0, root: m.root, size: m.size, peerId: new Uint8Array(16).fill(7) }).buffer });
  frame({ type: wire.T.HAVESET, n, runs: [[0, 1]] });
  const c = [...s.conns.values()][0];
  const now = performance.now();
  assert.equal(c.feeding(now), true, 'a peer just come, downloading, does not feed');
  assert.equal(c.feeding(now + 1000), false, 'a peer silent for a second still feeds');
  frame({ type: wire.T.HAVE, piece: 1 });
  assert.equal(c.feeding(performance.now()), true);
  c.since -= 1000; // a second on
  assert.equal(c.feeding(performance.now()), false, 'a peer that gets pieces but gives us none feeds');
  c.gotAt = performance.now();
  assert.equal(c.feeding(performance.now()), true, 'a peer that gets pieces and gives them does not feed');
  frame({ type: wire.T.HAVE, piece: 2 });
  frame({ type: wire.T.HAVE, piece: 3 });
  assert.equal(c.feeding(performance.now()), false, 'a seed counts as feeding');
  s.stopped = true;
  c.close();
});

test('a page with peers takes a window of pieces from the origin at once, not the rest of the object', () => {
  const PIECE = 16 << 10, n = 32;
  const m = { n, size: n * PIECE, pieceSize: PIECE, root: new Uint8Array(32), rootHex: '00'.repeat(32), pieceLen: () => PIECE };
  const s = new Swarm({ manifest: m, url: '/x', peerId: new Uint8Array(16), signal: null, cfg: { max_peers: 8, deadline_ms: 60000 }, limiter: new Limiter(1 << 20, 1 << 30) });
  s.swarmSize = 2;
  s.others = 1;
  const queued = [];
  s.toOrigin = (i) => { queued.push(i); s.asked.add(i); };
  s.originOut = () => queued.length;
  // A peer with nothing, not feeding: the origin rule holds (n = 2).
  s.conns.set('p', { unchoked: true, reader: {}, pausedUntil: 0, their: new wire.Bits(n), inflight: new Map(), depth: 2, feeding: () => false });
  s.schedule();
  assert.equal(queued.length, (128 << 10) / PIECE);
  s.schedule();
  assert.equal(queued.length, (128 << 10) / PIECE, 'a second window before the first came');
  // Past the deadline, the rest.
  s.started -= 61000;
  s.schedule();
  assert.equal(queued.length, n);
});
