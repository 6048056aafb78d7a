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

test('a request for a piece the page lacks is answered REJECT', () => {
  const PIECE = 16 << 10, n = 4;
  const m = { n, size: n * PIECE, pieceSize: PIECE, root: new Uint8Array(32), rootHex: '00'.repeat(32), pieceLen: () => PIECE };
  const s = new Swarm({ manifest: m, url: '/x', peerId: new Uint8Array(16), signal: null, cfg: { max_peers: 8, deadline_ms: 60000 }, limiter: new Limiter(1 << 20, 1 << 30) });
  const sent = [];
  const dc = { readyState: 'open', bufferedAmount: 0, send: (b) => sent.push(b), close() {} };
  s.connected({ close() {} }, dc);
  const peerId = new Uint8Array(16).fill(7);
  dc.onmessage({ data: wire.encodeHandshake({ caps: 0, root: m.root, size: m.size, peerId }).buffer });
  for (const f of [{ type: wire.T.HAVESET, n, runs: [] }, { type: wire.T.REQUEST, piece: 1, offset: 0, length: PIECE }]) {
    dc.onmessage({ data: wire.encodeFrame(f).slice().buffer });
  }
  s.stopped = true;
  for (const c of [...s.conns.values()]) c.close();
  const out = new Uint8Array(sent.reduce((a, b) => a + b.length, 0));
  sent.reduce((off, b) => { out.set(b, off); return off + b.length; }, 0);
  const r = new wire.FrameReader(new wire.Geometry(m.size, PIECE));
  r.push(out.subarray(wire.HANDSHAKE_LEN));
  const types = [];
  for (let f; (f = r.next());) types.push(f);
  const answer = types.find((f) => f.piece === 1);
  assert.ok(answer, 'no answer to the request');
  assert.equal(answer.type, wire.T.REJECT);
  assert.equal(answer.reason, wire.REJECT.DONT_HAVE);
});
