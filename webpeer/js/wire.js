// wire.js: the stampede peer protocol (docs/protocol.md, version 1) for
// browsers: the 66-byte handshake and every frame, encoded and decoded with
// the same checks as the Go package wire. It is tested against the Go
// encoder's frames (wire/testdata/frames.json, wire.test.js).
//
// A message is a plain object {type, ...fields}, with the field names of the
// test vectors: piece, offset, length, reason, bytes (a Uint8Array), up,
// first, count, hashes (Uint8Arrays of 32), text, peers ({addr, port, age}),
// and for a HAVESET n and runs ([start, end) pairs).

export const T = Object.freeze({
  KEEPALIVE: 0, HAVESET: 1, HAVE: 2, REQUEST: 3, DATA: 4, CANCEL: 5, REJECT: 6,
  START: 7, RECOMMEND: 8, CHOKE: 9, UNCHOKE: 10, GOODBYE: 11, STOP: 12,
  GETLAYER: 13, LAYER: 14, RATE: 17,
});

export const CAP_SEED = 1, CAP_LAYER = 4, CAP_PRIVATE = 8;
export const HANDSHAKE_LEN = 66;
export const MAX_DATA = 256 << 10;
export const MAX_FRAME = MAX_DATA + 64;
export const MAX_PIECES = 1 << 21;
export const MAX_LAYER_HASHES = MAX_DATA / 32;
export const BYE = Object.freeze({ PROTOCOL: 5, SHUTDOWN: 7, CORRUPT: 8, TOO_MANY: 9, DONE: 10 });
export const REJECT = Object.freeze({ OTHER: 0, CHOKED: 1, DONT_HAVE: 2, BUSY: 3 });

// Malformed is a protocol violation: it ends that connection only.
export class Malformed extends Error {}
const bad = (msg) => { throw new Malformed('wire: malformed frame: ' + msg); };

// Geometry is the swarm's shape: size bytes in pieces of pieceSize.
export class Geometry {
  constructor(size, pieceSize) {
    if (!(pieceSize > 0 && pieceSize <= 2 ** 30) || !(size >= 0)) throw new RangeError('bad geometry');
    this.size = size;
    this.pieceSize = pieceSize;
    this.n = Math.ceil(size / pieceSize);
    if (this.n > MAX_PIECES) throw new RangeError('too many pieces');
  }
  pieceLen(i) { return Math.min(this.pieceSize, this.size - i * this.pieceSize); }
  checkPiece(name, p) { if (p >= this.n) bad(`${name} piece ${p} of ${this.n}`); }
  checkRange(name, p, off, len) {
    this.checkPiece(name, p);
    if (len < 1 || off + len > this.pieceLen(p)) bad(`${name} [${off},+${len}) outside piece ${p}`);
  }
}

const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
export const toHex = hex;
export function fromHex(s) {
  const b = new Uint8Array(s.length >> 1);
  for (let i = 0; i < b.length; i++) b[i] = parseInt(s.substr(2 * i, 2), 16);
  return b;
}

// encodeHandshake returns the 66 bytes of h: {caps, root (32 bytes), size,
// peerId (16 bytes), listenPort}.
export function encodeHandshake(h) {
  const b = new Uint8Array(HANDSHAKE_LEN);
  const v = new DataView(b.buffer);
  b.set([0x53, 0x54, 0x4d, 0x50, 1, 0]);
  v.setUint16(6, (h.caps || 0) & ~CAP_PRIVATE);
  b.set(h.root, 8);
  v.setBigUint64(40, BigInt(h.size));
  b.set(h.peerId, 48);
  v.setUint16(64, h.listenPort || 0);
  return b;
}

// decodeHandshake reads 66 bytes. A browser speaks public swarms only: a
// handshake with PRIVATE is refused.
export function decodeHandshake(b) {
  if (b.length < HANDSHAKE_LEN || b[0] !== 0x53 || b[1] !== 0x54 || b[2] !== 0x4d || b[3] !== 0x50) {
    throw new Malformed('wire: not a stampede peer');
  }
  const v = new DataView(b.buffer, b.byteOffset, HANDSHAKE_LEN);
  if (b[4] < 1) throw new Malformed('wire: no common protocol version');
  const h = {
    version: b[4], caps: v.getUint16(6), root: b.slice(8, 40), size: Number(v.getBigUint64(40)),
    peerId: b.slice(48, 64), listenPort: v.getUint16(64),
  };
  if (h.caps & CAP_PRIVATE) throw new Malformed('wire: a private swarm');
  return h;
}

// Bits is a have-set of n pieces, as a bitfield (piece 0 is the high bit of
// byte 0).
export class Bits {
  constructor(n) { this.n = n; this.bytes = new Uint8Array((n + 7) >> 3); this.count = 0; }
  has(i) { return (this.bytes[i >> 3] & (0x80 >> (i & 7))) !== 0; }
  add(i) { if (!this.has(i)) { this.bytes[i >> 3] |= 0x80 >> (i & 7); this.count++; } }
  complete() { return this.count === this.n; }
  runs() {
    const out = [];
    for (let i = 0; i < this.n;) {
      if (!this.has(i)) { i++; continue; }
      let j = i;
      while (j < this.n && this.has(j)) j++;
      out.push([i, j]);
      i = j;
    }
    return out;
  }
  static fromRuns(n, runs) {
    const s = new Bits(n);
    for (const [a, b] of runs) for (let i = a; i < b; i++) s.add(i);
    return s;
  }
}

const uvarintLen = (v) => { let k = 1; while (v >= 128) { v = Math.floor(v / 128); k++; } return k; };
function putUvarint(out, v) {
  while (v >= 128) { out.push((v % 128) | 0x80); v = Math.floor(v / 128); }
  out.push(v);
}

function encodeHaveSet(n, runs) {
  let ivLen = uvarintLen(runs.length), prev = 0;
  for (const [a, b] of runs) { ivLen += uvarintLen(a - prev) + uvarintLen(b - a - 1); prev = b; }
  if (ivLen < (n + 7) >> 3) {
    const out = [1];
    putUvarint(out, runs.length);
    prev = 0;
    for (const [a, b] of runs) { putUvarint(out, a - prev); putUvarint(out, b - a - 1); prev = b; }
    return Uint8Array.from(out);
  }
  const bits = Bits.fromRuns(n, runs);
  const out = new Uint8Array(1 + bits.bytes.length);
  out.set(bits.bytes, 1);
  return out;
}

function readUvarint(p, st, limit) {
  let v = 0, mul = 1, k = 0;
  for (;;) {
    if (st.i >= p.length) bad('truncated uvarint');
    const c = p[st.i++];
    k++;
    v += (c & 0x7f) * mul;
    mul *= 128;
    if (!(c & 0x80)) {
      if (k > 1 && c === 0) bad('non-minimal uvarint');
      break;
    }
    if (k > 9) bad('uvarint too long');
  }
  if (v > limit) bad(`uvarint ${v} out of range`);
  return v;
}

function decodeHaveSet(p, n) {
  if (p[0] === 0) {
    if (p.length - 1 !== (n + 7) >> 3) bad(`HAVESET bitfield of ${p.length - 1} bytes for ${n} pieces`);
    const spare = (8 - (n & 7)) & 7;
    if (spare && (p[p.length - 1] & ((1 << spare) - 1))) bad('HAVESET bit set past the last piece');
    const s = new Bits(n);
    s.bytes.set(p.subarray(1));
    for (let i = 0; i < n; i++) if (s.has(i)) s.count++;
    return { n, runs: s.runs() };
  }
  if (p[0] !== 1) bad(`HAVESET encoding ${p[0]}`);
  const st = { i: 1 };
  const count = readUvarint(p, st, n);
  if (count > (p.length - st.i) / 2) bad(`HAVESET of ${count} intervals`);
  const runs = [];
  let prevEnd = 0;
  for (let i = 0; i < count; i++) {
    const gap = readUvarint(p, st, n), len = readUvarint(p, st, n) + 1;
    const start = prevEnd + gap;
    if (i > 0 && gap === 0) bad('HAVESET intervals touch');
    if (start > n - len) bad('HAVESET interval past the last piece');
    runs.push([start, start + len]);
    prevEnd = start + len;
  }
  if (st.i !== p.length) bad('HAVESET bytes after the last interval');
  return { n, runs };
}

function formatIP6(b) {
  const w = [];
  for (let i = 0; i < 16; i += 2) w.push((b[i] << 8) | b[i + 1]);
  let best = -1, bestLen = 1;
  for (let i = 0; i < 8;) {
    let j = i;
    while (j < 8 && w[j] === 0) j++;
    if (j - i > bestLen) { best = i; bestLen = j - i; }
    i = j > i ? j : i + 1;
  }
  const parts = w.map((x) => x.toString(16));
  if (best < 0) return parts.join(':');
  return parts.slice(0, best).join(':') + '::' + parts.slice(best + bestLen).join(':');
}

function parseIP(s) {
  if (!s.includes(':')) return Uint8Array.from(s.split('.').map(Number));
  const [head, tail] = s.includes('::') ? s.split('::') : [s, null];
  const hw = head ? head.split(':') : [], tw = tail ? tail.split(':') : [];
  const words = tail === null ? hw : [...hw, ...Array(8 - hw.length - tw.length).fill('0'), ...tw];
  const b = new Uint8Array(16);
  words.forEach((x, i) => { const v = parseInt(x, 16); b[2 * i] = v >> 8; b[2 * i + 1] = v & 255; });
  return b;
}

// encodeFrame returns m's frame: length, type, payload. It checks only what
// the payload's form needs; a peer checks the geometry before sending.
export function encodeFrame(m) {
  let p;
  const u32s = (...xs) => { const b = new Uint8Array(4 * xs.length); const v = new DataView(b.buffer); xs.forEach((x, i) => v.setUint32(4 * i, x)); return b; };
  switch (m.type) {
    case T.KEEPALIVE: case T.CHOKE: case T.UNCHOKE: p = new Uint8Array(0); break;
    case T.HAVE: case T.START: case T.STOP: p = u32s(m.piece); break;
    case T.RATE: p = u32s(m.up); break;
    case T.REQUEST: case T.CANCEL: p = u32s(m.piece, m.offset, m.length); break;
    case T.REJECT: p = new Uint8Array(13); p.set(u32s(m.piece, m.offset, m.length)); p[12] = m.reason; break;
    case T.GETLAYER: p = u32s(m.first, m.count); break;
    case T.DATA:
      if (!m.bytes.length || m.bytes.length > MAX_DATA) throw new RangeError('DATA of ' + m.bytes.length + ' bytes');
      p = new Uint8Array(8 + m.bytes.length); p.set(u32s(m.piece, m.offset)); p.set(m.bytes, 8); break;
    case T.LAYER:
      p = new Uint8Array(4 + 32 * m.hashes.length); p.set(u32s(m.first));
      m.hashes.forEach((h, i) => p.set(h, 4 + 32 * i)); break;
    case T.HAVESET: p = encodeHaveSet(m.n, m.runs); break;
    case T.GOODBYE: {
      const t = new TextEncoder().encode(m.text || '').subarray(0, 256);
      p = new Uint8Array(1 + t.length); p[0] = m.reason; p.set(t, 1); break;
    }
    case T.RECOMMEND: {
      const out = [m.peers.length];
      for (const r of m.peers) {
        const ip = parseIP(r.addr);
        out.push(ip.length === 4 ? 4 : 6, ...ip, r.port >> 8, r.port & 255, r.age >> 8, r.age & 255);
      }
      p = Uint8Array.from(out); break;
    }
    default: throw new RangeError('unknown frame type ' + m.type);
  }
  const f = new Uint8Array(5 + p.length);
  new DataView(f.buffer).setUint32(0, 1 + p.length);
  f[4] = m.type;
  f.set(p, 5);
  return f;
}

const EXACT = { [T.KEEPALIVE]: 0, [T.HAVE]: 4, [T.REQUEST]: 12, [T.CANCEL]: 12, [T.REJECT]: 13, [T.START]: 4, [T.CHOKE]: 0, [T.UNCHOKE]: 0, [T.STOP]: 4, [T.GETLAYER]: 8, [T.RATE]: 4 };
const MIN = { [T.HAVESET]: 1, [T.DATA]: 9, [T.RECOMMEND]: 1, [T.GOODBYE]: 1, [T.LAYER]: 4 };
const MAXP = { [T.GOODBYE]: 257, [T.RECOMMEND]: 1 + 32 * 21, [T.LAYER]: 4 + MAX_DATA, [T.DATA]: 8 + MAX_DATA };

// decodePayload decodes the payload p of a frame of known type t against
// the geometry g, with every check of docs/protocol.md.
export function decodePayload(t, p, g) {
  if (t in EXACT && p.length !== EXACT[t]) bad(`type ${t} payload of ${p.length} bytes`);
  if (p.length < (MIN[t] || 0) || p.length > (MAXP[t] ?? MAX_FRAME)) bad(`type ${t} payload of ${p.length} bytes`);
  const v = new DataView(p.buffer, p.byteOffset, p.length);
  const u = (i) => v.getUint32(4 * i);
  switch (t) {
    case T.KEEPALIVE: case T.CHOKE: case T.UNCHOKE: return { type: t };
    case T.HAVE: case T.START: case T.STOP: g.checkPiece('piece', u(0)); return { type: t, piece: u(0) };
    case T.RATE: return { type: t, up: u(0) };
    case T.REQUEST: case T.CANCEL: case T.REJECT: {
      g.checkRange('range', u(0), u(1), u(2));
      const m = { type: t, piece: u(0), offset: u(1), length: u(2) };
      if (t === T.REJECT) m.reason = p[12];
      return m;
    }
    case T.DATA: g.checkRange('DATA', u(0), u(1), p.length - 8); return { type: t, piece: u(0), offset: u(1), bytes: p.subarray(8) };
    case T.GETLAYER:
      if (g.n < 2 || u(1) < 1 || u(1) > MAX_LAYER_HASHES || u(0) + u(1) > g.n) bad('GETLAYER outside the layer');
      return { type: t, first: u(0), count: u(1) };
    case T.LAYER: {
      if ((p.length - 4) % 32) bad('LAYER of a partial hash');
      const k = (p.length - 4) / 32;
      if (g.n < 2 || u(0) + k > g.n) bad('LAYER outside the layer');
      const hashes = [];
      for (let i = 0; i < k; i++) hashes.push(p.slice(4 + 32 * i, 36 + 32 * i));
      return { type: t, first: u(0), hashes };
    }
    case T.HAVESET: return { type: t, ...decodeHaveSet(p, g.n) };
    case T.GOODBYE: {
      let text;
      try { text = new TextDecoder('utf-8', { fatal: true }).decode(p.subarray(1)); } catch { bad('GOODBYE text is not UTF-8'); }
      return { type: t, reason: p[0], text };
    }
    case T.RECOMMEND: {
      const count = p[0];
      if (count > 32) bad('RECOMMEND of too many peers');
      const peers = [];
      let i = 1, prev = 0;
      for (let k = 0; k < count; k++) {
        const fam = p[i], alen = fam === 4 ? 4 : fam === 6 ? 16 : bad(`RECOMMEND family ${fam}`);
        if (i + 1 + alen + 4 > p.length) bad('RECOMMEND truncated');
        const a = p.subarray(i + 1, i + 1 + alen);
        i += 1 + alen;
        const port = v.getUint16(i), age = v.getUint16(i + 2);
        i += 4;
        if (alen === 16 && a.subarray(0, 10).every((x) => x === 0) && a[10] === 255 && a[11] === 255) bad('RECOMMEND IPv4-mapped address');
        if (a.every((x) => x === 0) || port === 0) bad('RECOMMEND address not dialable');
        if (age < prev) bad('RECOMMEND ages decrease');
        prev = age;
        peers.push({ addr: alen === 4 ? Array.from(a).join('.') : formatIP6(a), port, age });
      }
      if (i !== p.length) bad('RECOMMEND trailing bytes');
      return { type: t, peers };
    }
  }
  return null;
}

// FrameReader turns a stream of chunks (data channel messages, whose
// boundaries need not match frames') into messages. The first message must
// be a HAVESET (or a KEEPALIVE or GOODBYE before it); frames of unknown type
// are skipped. Errors are sticky: after one, the stream is out of step.
export class FrameReader {
  constructor(g) { this.g = g; this.buf = new Uint8Array(0); this.gotHaveSet = false; this.err = null; }
  push(chunk) {
    const c = chunk instanceof Uint8Array ? chunk : new Uint8Array(chunk);
    const b = new Uint8Array(this.buf.length + c.length);
    b.set(this.buf);
    b.set(c, this.buf.length);
    this.buf = b;
  }
  // next returns the next message, or null when more bytes are needed.
  next() {
    if (this.err) throw this.err;
    try {
      for (;;) {
        if (this.buf.length < 4) return null;
        const l = new DataView(this.buf.buffer, this.buf.byteOffset, 4).getUint32(0);
        if (l < 1 || l > MAX_FRAME) bad(`frame length ${l}`);
        if (this.buf.length < 4 + l) return null;
        const t = this.buf[4], p = this.buf.slice(5, 4 + l);
        this.buf = this.buf.subarray(4 + l);
        const known = t <= 14 || t === T.RATE;
        if (!known) continue;
        if (!this.gotHaveSet && t !== T.HAVESET && t !== T.KEEPALIVE && t !== T.GOODBYE) bad(`type ${t} before HAVESET`);
        if (this.gotHaveSet && t === T.HAVESET) bad('a second HAVESET');
        const m = decodePayload(t, p, this.g);
        if (t === T.HAVESET) this.gotHaveSet = true;
        return m;
      }
    } catch (e) {
      this.err = e;
      throw e;
    }
  }
}
