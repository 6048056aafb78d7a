// Tests swarm.js's pure parts under node: the upload limiter.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Limiter } from './swarm.js';

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
