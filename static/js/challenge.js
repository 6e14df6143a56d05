/* The proof-of-work challenge a session solves before its first vote (ALTCHA's protocol, version
   1, checked on the server by the `altcha` Python package): the server sends
   {algorithm: "SHA-256", challenge, salt, maxnumber, signature}, and the answer is the number n,
   0 <= n <= maxnumber, with hex(SHA-256(salt + n)) == challenge. The payload sent back is ALTCHA's:
   base64 of the JSON {algorithm, challenge, number, salt, signature}.

   A small solver of its own rather than ALTCHA's widget: no inline styles, no extra worker file,
   nothing for the page's strict CSP to allow. It runs on the page's thread, hashing in batches
   with crypto.subtle (asynchronous, so the page stays responsive). */

const BATCH = 256;
const encoder = new TextEncoder();

function hex(buffer) {
  return Array.from(new Uint8Array(buffer), (b) => b.toString(16).padStart(2, "0")).join("");
}

async function sha256Hex(text) {
  return hex(await crypto.subtle.digest("SHA-256", encoder.encode(text)));
}

/* The number that solves the challenge, or null if none up to maxnumber does. */
export async function solveNumber(challenge) {
  if (challenge.algorithm !== "SHA-256") throw new Error("Unsupported challenge algorithm.");
  for (let start = 0; start <= challenge.maxnumber; start += BATCH) {
    const end = Math.min(start + BATCH - 1, challenge.maxnumber);
    const numbers = [];
    for (let n = start; n <= end; n++) numbers.push(n);
    const digests = await Promise.all(numbers.map((n) => sha256Hex(challenge.salt + n)));
    const found = digests.indexOf(challenge.challenge);
    if (found !== -1) return numbers[found];
  }
  return null;
}

/* ALTCHA's payload for a solved challenge (what POST /api/challenge/verify takes). */
export async function solveChallenge(challenge) {
  const number = await solveNumber(challenge);
  if (number === null) throw new Error("The challenge could not be solved; reload the page.");
  return btoa(JSON.stringify({
    algorithm: challenge.algorithm,
    challenge: challenge.challenge,
    number: number,
    salt: challenge.salt,
    signature: challenge.signature,
  }));
}
