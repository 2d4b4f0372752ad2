// Drives @parse/node-apn. Its Provider opens one HTTP/2 session to
// https://<address> (lib/client.js: http2.connect, with the provider's
// options, whose port is the one connected to) and sends each device of a
// call as a stream of its own, all at once. The gateway is named by the
// address and port options, its certificate's CA by the ca option; token auth with a P-256 key
// (input.keyFile, PEM) that the mock checks the JWTs against. Input:
// {"address", "port", "caFile", "keyFile", "keyId", "teamId", "topic", "calls":
// [{"devices": [token, ...], "alert"}]}. Output: {"results": [{"sent":
// [...], "failed": [{device, status, response, error}]}, with "wire": every
// HTTP/2 stream]}.
import apn from '@parse/node-apn';
import { input, print, runCalls, version } from './lib.mjs';

const provider = new apn.Provider({
  token: { key: input.keyFile, keyId: input.keyId, teamId: input.teamId },
  address: input.address,
  port: input.port,
  ca: input.caFile,
  production: true,
});

const results = await runCalls(async (call) => {
  const note = new apn.Notification();
  note.alert = call.alert;
  note.topic = input.topic;
  const res = await provider.send(note, call.devices);
  return {
    sent: res.sent,
    failed: res.failed.map((f) => ({
      device: f.device,
      status: f.status ?? null,
      response: f.response ?? null,
      error: f.error ? String(f.error.message ?? f.error) : null,
    })),
  };
}, (e) => ({ name: e?.constructor?.name, message: String(e?.message ?? e) }));

await provider.shutdown();
print({ sdk: '@parse/node-apn', version: version('@parse/node-apn'), node: process.version, results });
