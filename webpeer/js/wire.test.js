// Tests wire.js against the Go encoder's frames (wire/testdata/frames.json):
// node --test webpeer/js/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import * as wire from './wire.js';

const vectors = JSON.parse(readFileSync(new URL('../../wire/testdata/frames.json', import.meta.url)));

// fields turns a decoded message into the vectors' JSON form.
function fields(m) {
  const f = { ...m };
  delete f.type;
  if (f.bytes) f.bytes = wire.toHex(f.bytes);
  if (f.hashes) f.hashes = f.hashes.map(wire.toHex);
  return f;
}

test('handshakes', () => {
  for (const v of vectors.handshakes) {
    const h = wire.decodeHandshake(wire.fromHex(v.hex));
    assert.equal(h.version, v.version, v.name);
    assert.equal(h.caps, v.caps, v.name);
    assert.equal(wire.toHex(h.root), v.root, v.name);
    assert.equal(h.size, v.size, v.name);
    assert.equal(wire.toHex(h.peerId), v.peer_id, v.name);
    assert.equal(h.listenPort, v.listen_port, v.name);
    const b = wire.encodeHandshake({ caps: v.caps, root: wire.fromHex(v.root), size: v.size, peerId: wire.fromHex(v.peer_id), listenPort: v.listen_port });
    assert.equal(wire.toHex(b), v.hex, v.name);
  }
});

test('frames decode to the Go fields and encode to the Go bytes', () => {
  for (const v of vectors.frames) {
    const g = new wire.Geometry(v.size, v.piece_size);
    const r = new wire.FrameReader(g);
    if (v.type !== wire.T.HAVESET) r.gotHaveSet = true;
    const bytes = wire.fromHex(v.hex);
    // Fed one byte at a time: frame and message boundaries are unrelated.
    let m = null;
    for (const b of bytes) {
      r.push(Uint8Array.of(b));
      m = m || r.next();
    }
    if (v.skipped) {
      assert.equal(m, null, v.name);
      assert.equal(r.buf.length, 0, v.name);
      continue;
    }
    assert.ok(m, v.name);
    assert.equal(m.type, v.type, v.name);
    assert.deepEqual(fields(m), v.fields, v.name);
    const enc = { type: v.type, ...v.fields };
    if (enc.bytes) enc.bytes = wire.fromHex(enc.bytes);
    if (enc.hashes) enc.hashes = enc.hashes.map(wire.fromHex);
    assert.equal(wire.toHex(wire.encodeFrame(enc)), v.hex, v.name);
  }
});

test('invalid frames are refused', () => {
  for (const v of vectors.invalid) {
    const r = new wire.FrameReader(new wire.Geometry(v.size, v.piece_size));
    const b = wire.fromHex(v.hex);
    if (b[4] !== wire.T.HAVESET) r.gotHaveSet = true;
    r.push(b);
    assert.throws(() => r.next(), wire.Malformed, v.name);
  }
});

test('a frame before HAVESET is refused', () => {
  const r = new wire.FrameReader(new wire.Geometry(1000, 10));
  r.push(wire.encodeFrame({ type: wire.T.HAVE, piece: 1 }));
  assert.throws(() => r.next(), wire.Malformed);
});
