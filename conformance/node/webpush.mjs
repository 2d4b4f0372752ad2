// Drives web-push. web-push sends every notification with https.request to
// the subscription's endpoint (src/web-push-lib.js), so the gateway is an
// HTTPS site; its certificate's CA (input.caFile) is trusted through the
// agent option (an https.Agent with that CA), nothing is left unverified.
// Input: {"caFile", "calls": [{"endpoint", "payload"}]}: each call is
// webpush.sendNotification({endpoint, keys}, payload, {vapidDetails, TTL,
// agent}) with a fresh P-256 subscription key and auth secret, as a
// browser makes them, and VAPID keys made once. Output: {"results":
// [{"statusCode", "headers"} | {"error": {...}}, with "wire"]}.
import { createECDH, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import https from 'node:https';
import webpush from 'web-push';
import { input, print, runCalls, version } from './lib.mjs';

const agent = new https.Agent({ ca: readFileSync(input.caFile), keepAlive: true });
const vapid = webpush.generateVAPIDKeys();
const b64url = (b) => b.toString('base64').replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');

const results = await runCalls(async (call) => {
  const ecdh = createECDH('prime256v1');
  ecdh.generateKeys();
  const subscription = {
    endpoint: call.endpoint,
    keys: { p256dh: b64url(ecdh.getPublicKey()), auth: b64url(randomBytes(16)) },
  };
  const res = await webpush.sendNotification(subscription, call.payload, {
    vapidDetails: { subject: 'mailto:conformance@example.com', publicKey: vapid.publicKey, privateKey: vapid.privateKey },
    TTL: 60,
    agent,
  });
  return { statusCode: res.statusCode, headers: res.headers };
}, (e) => ({
  name: e?.constructor?.name,
  webPushError: e instanceof webpush.WebPushError,
  message: String(e?.message ?? e),
  statusCode: e?.statusCode ?? null,
  headers: e?.headers ?? null,
  body: e?.body ?? null,
}));

print({ sdk: 'web-push', version: version('web-push'), node: process.version, results });
