/* The proof-of-work challenge a session solves before its first vote (ALTCHA's protocol, version
   1, checked on the server by the `altcha` Python package): the server sends
   {algorithm: "SHA-256", challenge, salt, maxnumber, signature}, and the answer is the number n,
   0 <= n <= maxnumber, with hex(SHA-256(salt + n)) == challenge. The payload sent back is ALTCHA's:
   base64 of the JSON {algorithm, challenge, number, salt, signature}.

   A small solver of its own rather than ALTCHA's widget: no inline styles, no extra worker file,
   nothing for the page's strict CSP to allow. SHA-256 is computed here (FIPS 180-4) rather than by
   crypto.subtle, which exists only in secure contexts (a plain-http trial on a LAN address has
   none) and costs a promise per hash; batches of hashes alternate with yields to the event loop,
   so the page stays responsive. */

import { gettext } from "./i18n.js";

const BATCH = 2000;
const encoder = new TextEncoder();
// The first 32 bits of the fractional parts of the cube roots of the first 64 primes.
const K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);
const H0 = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];
const W = new Uint32Array(64);

const rotr = (x, n) => (x >>> n) | (x << (32 - n));
const digest = new Int32Array(8);

/* Padded message words of these bytes (a function of the index) into m; returns their count. */
function pad(m, length, byteAt) {
  const words = (((length + 8) >> 6) + 1) << 4;  // padded length, in 32-bit words
  m.fill(0, 0, words);
  for (let i = 0; i < length; i++) m[i >> 2] |= byteAt(i) << (24 - (i & 3) * 8);
  m[length >> 2] |= 0x80 << (24 - (length & 3) * 8);
  m[words - 1] = length * 8;
  return words;
}

/* SHA-256 (FIPS 180-4) of the first ``words`` words of m, into ``digest``. */
function compress(m, words) {
  digest.set(H0);
  for (let offset = 0; offset < words; offset += 16) {
    for (let t = 0; t < 16; t++) W[t] = m[offset + t];
    for (let t = 16; t < 64; t++) {
      const x = W[t - 15];
      const y = W[t - 2];
      W[t] = W[t - 16] + (rotr(x, 7) ^ rotr(x, 18) ^ (x >>> 3)) + W[t - 7] + (rotr(y, 17) ^ rotr(y, 19) ^ (y >>> 10));
    }
    let a = digest[0], b = digest[1], c = digest[2], d = digest[3];
    let e = digest[4], f = digest[5], g = digest[6], h = digest[7];
    for (let t = 0; t < 64; t++) {
      const t1 = (h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + W[t]) | 0;
      const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) | 0;
      h = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b; b = a; a = (t1 + t2) | 0;
    }
    digest[0] += a; digest[1] += b; digest[2] += c; digest[3] += d;
    digest[4] += e; digest[5] += f; digest[6] += g; digest[7] += h;
  }
}

/* Hex SHA-256 of a string's UTF-8 bytes. */
export function sha256Hex(text) {
  const bytes = encoder.encode(text);
  const m = new Uint32Array((((bytes.length + 8) >> 6) + 1) << 4);
  compress(m, pad(m, bytes.length, (i) => bytes[i]));
  return Array.from(digest, (x) => (x >>> 0).toString(16).padStart(8, "0")).join("");
}

const nextTask = () => new Promise((resolve) => setTimeout(resolve, 0));

/* The number that solves the challenge, or null if none up to maxnumber does. The salt and the
   numbers are ASCII (the server's salt is hex and a query string), so each candidate's bytes are
   its char codes, padded into one reused buffer and compared with the target word by word. */
export async function solveNumber(challenge) {
  if (challenge.algorithm !== "SHA-256") throw new Error(gettext("Unsupported challenge algorithm."));
  if (!/^[0-9a-f]{64}$/.test(challenge.challenge) || /[^\x00-\x7f]/.test(challenge.salt)) {
    throw new Error(gettext("Not a challenge of this arena."));
  }
  const target = new Int32Array(8);
  for (let i = 0; i < 8; i++) target[i] = parseInt(challenge.challenge.slice(i * 8, i * 8 + 8), 16) | 0;
  const m = new Uint32Array((((challenge.salt.length + 24) >> 6) + 1) << 4);
  for (let n = 0; n <= challenge.maxnumber; n++) {
    const text = challenge.salt + n;
    compress(m, pad(m, text.length, (i) => text.charCodeAt(i)));
    if (digest[0] === target[0] && digest.every((x, i) => x === target[i])) return n;
    if (n % BATCH === BATCH - 1) await nextTask();
  }
  return null;
}

/* ALTCHA's payload for a solved challenge (what POST /api/challenge/verify takes). */
export async function solveChallenge(challenge) {
  const number = await solveNumber(challenge);
  if (number === null) throw new Error(gettext("The challenge could not be solved; reload the page."));
  return btoa(JSON.stringify({
    algorithm: challenge.algorithm,
    challenge: challenge.challenge,
    number: number,
    salt: challenge.salt,
    signature: challenge.signature,
  }));
}
