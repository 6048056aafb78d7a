// Tests verify.js against manifests the Go package built
// (webpeer/testdata/manifests.json, TestFixtures).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { Manifest } from './verify.js';

const fixtures = JSON.parse(readFileSync(new URL('../testdata/manifests.json', import.meta.url)));

// content is the fixtures' file: byte i is (i*7 + (i>>>8) + (i>>>16)*13) & 255.
const content = (size) => Uint8Array.from({ length: size }, (_, i) => (i * 7 + (i >>> 8) + (i >>> 16) * 13) & 255);

test('every piece of the Go manifests verifies, and a changed byte does not', async () => {
  for (const f of fixtures) {
    const m = await Manifest.parse(f.manifest);
    const data = content(f.manifest.size);
    for (let i = 0; i < m.n; i++) {
      const p = data.slice(i * m.pieceSize, i * m.pieceSize + m.pieceLen(i));
      assert.ok(await m.verify(i, p), `${f.name}: piece ${i}`);
      p[p.length - 1] ^= 1;
      assert.ok(!(await m.verify(i, p)), `${f.name}: corrupt piece ${i}`);
      assert.ok(!(await m.verify(i, p.subarray(1))), `${f.name}: short piece ${i}`);
    }
  }
});

test('a manifest whose layer does not hash to its root is refused', async () => {
  for (const f of fixtures) {
    const j = { ...f.manifest, root: f.manifest.root.replace(/^./, (c) => (c === '0' ? '1' : '0')) };
    await assert.rejects(Manifest.parse(j), /root|layer/, f.name);
  }
});
