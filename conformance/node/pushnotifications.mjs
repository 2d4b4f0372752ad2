// Drives node-pushnotifications, which sends FCM with its own
// firebase-admin (sendEachForMulticast, on firebase-admin's default HTTP/2
// transport, which it gives no way to change) and APNs with @parse/node-apn.
// Neither can be given another host here, so the test runs this script
// with intercept.mjs preloaded (egress interception: fcm.googleapis.com and
// api.push.apple.com resolve to 127.0.0.1 and port 443 moves to the
// gateway's sites for them; their certificates are verified against the
// test CA in NODE_EXTRA_CA_CERTS). FCM's credential is an object whose
// getAccessToken() returns a fake token; APNs uses token auth with
// input.apn's key. Input: {"projectId", "apn": {keyFile, keyId, teamId},
// "calls": [{"regIds": [{id, type: "fcm"|"apn"}], "data": {...}}]}. Output:
// {"results": [{"results": [one per method: {method, success, failure,
// message: [{regId, originalRegId, messageId, error, errorMsg}]}]}, with
// "wire"]}, and "lookups".
import PushNotifications from 'node-pushnotifications';
import { lookups } from './intercept.mjs';
import { input, print, runCalls, version } from './lib.mjs';

const push = new PushNotifications({
  fcm: {
    appName: 'conformance',
    projectId: input.projectId,
    credential: {
      getAccessToken: async () => ({ access_token: 'fake-access-token', expires_in: 3600 }),
    },
  },
  apn: {
    token: { key: input.apn.keyFile, keyId: input.apn.keyId, teamId: input.apn.teamId },
    production: true,
  },
});

const describe = (e) => (e == null ? null : {
  name: e?.constructor?.name,
  code: e?.code ?? null,
  message: String(e?.message ?? e),
});

const results = await runCalls(async (call) => {
  const res = await push.send(call.regIds, call.data);
  return {
    results: res.map((r) => ({
      method: r.method,
      success: r.success,
      failure: r.failure,
      message: r.message.map((m) => ({
        regId: m.regId,
        originalRegId: m.originalRegId ?? null,
        messageId: m.messageId ?? null,
        error: describe(m.error),
        errorMsg: m.errorMsg == null ? null : String(m.errorMsg),
      })),
    })),
  };
}, describe);

print({
  sdk: 'node-pushnotifications',
  version: version('node-pushnotifications'),
  // Its own firebase-admin (it pins one of its own), else the shared one.
  firebaseAdmin: (() => {
    try {
      return version('node-pushnotifications/node_modules/firebase-admin');
    } catch {
      return version('firebase-admin');
    }
  })(),
  nodeAPN: version('@parse/node-apn'),
  node: process.version,
  results,
  lookups,
});
