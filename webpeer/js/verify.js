// verify.js: the manifest's merkle tree (manifest/merkle.go) with
// SubtleCrypto SHA-256. A piece's hash is the root of its 16 KiB blocks'
// hashes padded with zero leaves to the piece's width; the file's root is
// the root of the piece layer padded with all-zero subtrees. Nothing a peer
// sends is used before it checks here.

const BLOCK = 16 << 10;

export const sha256 = async (b) => new Uint8Array(await crypto.subtle.digest('SHA-256', b));

const nextPow2 = (n) => { let p = 1; while (p < n) p *= 2; return p; };

export function equal(a, b) {
  if (a.length !== b.length) return false;
  let d = 0;
  for (let i = 0; i < a.length; i++) d |= a[i] ^ b[i];
  return d === 0;
}

const pair = (l, r) => { const b = new Uint8Array(64); b.set(l); b.set(r, 32); return sha256(b); };

// reduce hashes a layer up to its root, padded to width leaves whose
// subtrees have root pad.
async function reduce(layer, width, pad) {
  if (!layer.length) return new Uint8Array(32);
  while (width > 1) {
    const next = [];
    for (let i = 0; i < layer.length; i += 2) next.push(pair(layer[i], i + 1 < layer.length ? layer[i + 1] : pad));
    layer = await Promise.all(next);
    pad = await pair(pad, pad);
    width /= 2;
  }
  return layer[0];
}

function leafWidth(size, pieceSize) {
  return size <= pieceSize ? nextPow2(Math.ceil(size / BLOCK)) : pieceSize / BLOCK;
}

// pieceHash is the root of data's blocks, padded to width leaves.
export async function pieceHash(data, width) {
  const blocks = [];
  for (let off = 0; off < data.length; off += BLOCK) blocks.push(sha256(data.subarray(off, off + BLOCK)));
  return reduce(await Promise.all(blocks), width, new Uint8Array(32));
}

async function rootOf(pieces, pieceSize) {
  if (pieces.length <= 1) return pieces[0] || new Uint8Array(32);
  let pad = new Uint8Array(32);
  for (let n = pieceSize / BLOCK; n > 1; n /= 2) pad = await pair(pad, pad);
  return reduce(pieces, nextPow2(pieces.length), pad);
}

const unhex = (s) => Uint8Array.from(s.match(/../g) || [], (x) => parseInt(x, 16));

// Manifest is a decoded manifest whose piece layer checked against its root.
export class Manifest {
  constructor(j, pieces) {
    this.size = j.size;
    this.pieceSize = j.piece_size;
    this.root = unhex(j.root);
    this.rootHex = j.root;
    this.etag = j.etag || '';
    this.trackers = j.trackers || [];
    this.pieces = pieces;
    this.n = Math.ceil(this.size / this.pieceSize);
    this.width = leafWidth(this.size, this.pieceSize);
  }
  pieceLen(i) { return Math.min(this.pieceSize, this.size - i * this.pieceSize); }

  // parse decodes the manifest JSON the origin serves and checks it.
  static async parse(j) {
    if (j.version !== 1 || !(j.size > 0) || !(j.piece_size >= BLOCK) || j.piece_size % BLOCK || !/^[0-9a-f]{64}$/.test(j.root)) {
      throw new Error('manifest: not a version 1 manifest of a non-empty file');
    }
    const raw = Uint8Array.from(atob(j.piece_layer || ''), (c) => c.charCodeAt(0));
    const pieces = [];
    for (let i = 0; i + 32 <= raw.length; i += 32) pieces.push(raw.subarray(i, i + 32));
    const m = new Manifest(j, pieces);
    if (pieces.length !== m.n || raw.length !== 32 * m.n) throw new Error('manifest: piece layer does not fit the size');
    if (!equal(await rootOf(pieces, m.pieceSize), m.root)) throw new Error('manifest: piece layer does not hash to the root');
    return m;
  }

  // verify reports whether data is exactly piece i.
  async verify(i, data) {
    if (!(i >= 0 && i < this.n) || data.length !== this.pieceLen(i)) return false;
    return equal(await pieceHash(data, this.width), this.pieces[i]);
  }
}
