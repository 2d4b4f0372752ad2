// Drives firebase-admin's messaging on its own transport: it sends to
// https://fcm.googleapis.com (FCM_SEND_HOST in lib/messaging/messaging.js,
// a constant; sendEach's HTTP/2 session ignores httpAgent), so the test
// runs this script with intercept.mjs preloaded (egress interception: the
// gateway answers for fcm.googleapis.com with a certificate of the test
// CA, which NODE_EXTRA_CA_CERTS makes trusted). The credential is an
// object whose getAccessToken() returns a fake token: nothing asks Google.
// Input: {"projectId", "legacy": bool (enableLegacyHttpTransport(): sendEach
// over HTTP/1.1), "calls": [{"send": message} | {"sendEach": [message, ...]}
// | {"multicast": {tokens, ...}}]}. Output: {"results": [{"name"} |
// {"batch": {successCount, failureCount, responses: [{success, messageId,
// error}]}} | {"error": {...}}, with "wire": the HTTP/1.1 requests (HTTP/2
// streams are not in Node 20's diagnostics channels)]}, and "lookups", every
// name the process looked up.
import { initializeApp } from 'firebase-admin/app';
import { getMessaging } from 'firebase-admin/messaging';
import { lookups } from './intercept.mjs';
import { input, print, runCalls, version } from './lib.mjs';

const app = initializeApp({
  projectId: input.projectId,
  credential: {
    getAccessToken: async () => ({ access_token: 'fake-access-token', expires_in: 3600 }),
  },
});
const messaging = getMessaging(app);
if (input.legacy) messaging.enableLegacyHttpTransport();

const describe = (e) => ({
  name: e?.constructor?.name,
  code: e?.code ?? null,
  message: String(e?.message ?? e),
});

const results = await runCalls(async (call) => {
  if (call.send !== undefined) return { name: await messaging.send(call.send) };
  const batch = call.sendEach !== undefined
    ? await messaging.sendEach(call.sendEach)
    : await messaging.sendEachForMulticast(call.multicast);
  return {
    batch: {
      successCount: batch.successCount,
      failureCount: batch.failureCount,
      responses: batch.responses.map((r) => ({
        success: r.success,
        messageId: r.messageId ?? null,
        error: r.error ? describe(r.error) : null,
      })),
    },
  };
}, describe);

print({ sdk: 'firebase-admin', version: version('firebase-admin'), node: process.version, results, lookups });
